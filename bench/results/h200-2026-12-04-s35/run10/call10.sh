#!/bin/bash
# Session 35 call 10: stsm = the backward's dK / dV staged by stmatrix (head dims 64, 128) against main (full.so):
# tests, memcheck, CUPTI kernel times at 1k (two rounds alternating).
A=.after-s35a
python3 -c "
import lzma,pathlib
for n in ['full','stsm']: pathlib.Path(f'$A/{n}.so').write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/stsm.so --name bwd-stsm --timeout 100
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/stsm.so --name bwd-stsm-memcheck --sanitize memcheck --timeout 100 -k "(dense and (64 or 128) and not 512 and not 1024) or head_dims or (gqa and 128 and not scheme)"
for r in 1 2; do for lib in full stsm; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 60 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
cat $OUT/t/summary.txt
grep -h "####\|==\|bwd_kernel" $OUT/kernels.txt | cut -c1-75
cd $OUT && tar czf all.tgz t && rm -rf t
