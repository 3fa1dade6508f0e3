#!/bin/bash
# Session 37 call 3: alt = main + the two dQ warps of the ordered dQ taking the blocks by turns (one dq_full per
# warp), head dim 128. Tests (deterministic and d128 cases, memcheck of the ordered ones), then CUPTI main-kernel
# times against main 6f45acf (two rounds alternating).
A=.after-s37
python3 -c "
import lzma,pathlib
for n in ['main','alt']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/alt.so --name bwd-alt --timeout 200 -k "128 and not 192 or determin or race or reused"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/alt.so --name bwd-alt-memcheck --sanitize memcheck --timeout 200 -k "ordered_dq and 128 and not 192"
cat $OUT/t/summary.txt
for r in 1 2; do for lib in main alt; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 100 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && rm -rf t
