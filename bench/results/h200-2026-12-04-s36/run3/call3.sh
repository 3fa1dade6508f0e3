#!/bin/bash
# Session 36 call 3: p2 = pers with each item claimed when the CTA moves on (no claim a whole item ahead)
# and the ordered dQ's arrivals after the next block's reductions (every head dim) against main 6f45acf
# (head dim 128): test_backward, the value-dim / sink tests, CUPTI kernel times (two rounds alternating).
A=.after-s36
python3 -c "
import lzma,pathlib
for n in ['main','p2']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/p2.so --name bwd-p2 --timeout 150
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $A/p2.so --name vds-p2 --timeout 120
for r in 1 2; do for lib in main p2; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 90 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
cat $OUT/t/summary.txt
grep -h "####\|bwd_kernel" $OUT/kernels.txt | cut -c1-40
cd $OUT && tar czf all.tgz t && rm -rf t
