#!/bin/bash
# Session 37 call 9: sr = bf9e1a3 + d256's ordered dQ releasing the Q/dO stage once its bulk tensor reductions have
# read it (before waiting for their writes and counting), head dim 256 only. Tests (d256 deterministic cases), then
# CUPTI main-kernel times against all6 (bf9e1a3, every head dim), two rounds alternating, d256 (KP_D=256: 16 x 1k
# 8/8 and 32/4, 1 x 16k 8/8).
A=.after-s37
python3 -c "
import lzma,pathlib
for n in ['all6','sr']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/sr.so --name bwd-sr --timeout 100 -k "256 and (determin or ordered or race or varlen)"
cat $OUT/t/summary.txt
for r in 1 2; do for lib in all6 sr; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_D=256 KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 60 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && rm -rf t
