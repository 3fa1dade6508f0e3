#!/bin/bash
# Session 37 call 2: what the ordered dQ instance loses without turn waits (npm of call 1): CUPTI main-kernel times
# (two rounds alternating) of main 6f45acf against measuring builds of its ordered dQ instance (head dim 128),
# all without turn waits and in the default grid's pair-major order:
#   npm = as call 1 (each dQ warp: reductions, read wait, dq_empty, completion wait, proxy fence, release add)
#   nr  = no arrival at all (no completion wait, fence or release add)
#   nwr = the fence and release add, without the completion wait
A=.after-s37
python3 -c "
import lzma,pathlib
for n in ['main','npm','nr','nwr']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
for r in 1 2; do for lib in main npm nr nwr; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 100 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
grep -h "####\|== \|bwd_kernel" $OUT/kernels.txt | cut -c1-70 | head -150
