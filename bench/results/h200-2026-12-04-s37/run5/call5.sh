#!/bin/bash
# Session 37 call 5: tma = main + the dQ hand-off by bulk tensor reductions (swizzled 32-column boxes, one thread
# per block) + the ordered dQ's two dQ warps by turns (head dim 128). Tests (d128 and deterministic cases, memcheck
# of the ordered and dense ones), then CUPTI main-kernel times against main 6f45acf (two rounds alternating).
A=.after-s37
python3 -c "
import lzma,pathlib
for n in ['main','tma']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/tma.so --name bwd-tma --timeout 200 -k "128 and not 192 or determin or race or reused or varlen or strided or larger or empty"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/tma.so --name bwd-tma-memcheck --sanitize memcheck --timeout 250 -k "(ordered_dq and 128 and not 192) or (dense and 128 and not 192 and not 512 and not 1024) or varlen"
cat $OUT/t/summary.txt
for r in 1 2; do for lib in main tma; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 100 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && rm -rf t
