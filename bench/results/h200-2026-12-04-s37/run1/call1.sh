#!/bin/bash
# Session 37 call 1: where deterministic mode's time goes beyond the turns. CUPTI main-kernel times (two rounds
# alternating) of main 6f45acf against three measuring builds of its ordered dQ instance (head dim 128):
#   npm  = no turn waits (turn forced to 0) and the default grid's pair-major order
#   nsec = no turn waits, main's section order
#   pmw  = the turns kept (bitwise order), pair-major order
A=.after-s37
python3 -c "
import lzma,pathlib
for n in ['main','npm','nsec','pmw']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
for r in 1 2; do for lib in main npm nsec pmw; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 100 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
grep -h "####\|== \|bwd_kernel" $OUT/kernels.txt | cut -c1-70 | head -150
