#!/bin/bash
# Session 36 call 2: pers v1 = the persistent Hopper backward (claims one item ahead; every head dim) against main
# 6f45acf (head dim 128): tests (all of test_backward, the backward cases of test_value_dim_sink),
# memcheck, CUPTI kernel times (d128, 1k MHA / 64/8 and 16k MHA, two rounds alternating).
A=.after-s36
python3 -c "
import lzma,pathlib
for n in ['main','new']: pathlib.Path(f'$A/{n}.so').write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/new.so --name bwd-pers --timeout 150
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $A/new.so --name vds-pers --timeout 120
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/new.so --name bwd-pers-memcheck --sanitize memcheck --timeout 150 -k "(dense and (64 or 128) and not 512 and not 1024) or head_dims or (gqa and 128 and not scheme) or empty or varlen"
for r in 1 2; do for lib in main new; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 90 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
cat $OUT/t/summary.txt
grep -h "####\|==\|bwd_kernel" $OUT/kernels.txt | cut -c1-75
cd $OUT && tar czf all.tgz t && rm -rf t
