#!/bin/bash
# Session 37 call 7: tma5 = run 6's tma4 + the dQ scratch's map with a dense batch's sequences as a dimension (the
# hardware drops a box's rows past the sequence), so a dense sequence's last, partial block is added by TMA too
# (head dim 128). Tests (d128, deterministic, varlen cases; memcheck of the ordered, dense and varlen ones), then
# CUPTI main-kernel times against main 6f45acf (two rounds alternating).
A=.after-s37
python3 -c "
import lzma,pathlib
for n in ['main','tma5']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/tma5.so --name bwd-tma5 --timeout 200 -k "128 and not 192 or determin or race or reused or varlen or strided or larger or empty"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/tma5.so --name bwd-tma5-memcheck --sanitize memcheck --timeout 250 -k "(ordered_dq and 128 and not 192) or (dense and 128 and not 192 and not 512 and not 1024) or varlen"
cat $OUT/t/summary.txt
for r in 1 2; do for lib in main tma5; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 100 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && rm -rf t
