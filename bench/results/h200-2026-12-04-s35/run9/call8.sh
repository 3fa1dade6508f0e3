#!/bin/bash
# Session 35 call 8: early = the backward's first TMA loads at the CTA's start (every head dim) against main (full.so):
# tests, memcheck, CUPTI kernel times at 1k (two rounds alternating).
export GPU_DEADLINE_AT=$(( $(date +%s) + 500 ))
A=.after-s35a
python3 -c "
import lzma,pathlib
for n in ['full','early']: pathlib.Path(f'$A/{n}.so').write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/early.so --name bwd-early
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $A/early.so --name vds-early -k "backward or dsink"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/early.so --name bwd-early-memcheck --sanitize memcheck -k "(dense and causal and not 512 and not 1024) or strided or empty or head_dims or (gqa and not scheme) or ordered"
for r in 1 2; do for lib in full early; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 90 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
cat $OUT/t/summary.txt
grep -h "####\|==\|bwd_kernel" $OUT/kernels.txt | cut -c1-75
cd $OUT && tar czf all.tgz t && rm -rf t
