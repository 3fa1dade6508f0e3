#!/bin/bash
# Session 37 call 4: what in the ordered dQ's count costs. CUPTI main-kernel times (two rounds alternating) of main
# 6f45acf and measuring builds on alt (the dQ warps by turns), all without turn waits and in pair-major order
# (head dim 128); each dQ warp's count after a block's reductions:
#   anpm = alt's: completion wait (bulk wait_group 0), proxy fence, red.release.gpu
#   afa3 = FlashAttention-3's: red.release.gpu after the reductions' reads only (no completion wait, no proxy fence)
#   arl  = completion wait, then red.relaxed.gpu (no fence at all)
#   anr  = red.relaxed.gpu after the reads only
A=.after-s37
python3 -c "
import lzma,pathlib
for n in ['main','anpm','afa3','arl','anr']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
for r in 1 2; do for lib in main anpm afa3 arl anr; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 100 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
