#!/bin/bash
# Session 36 call 6: deterministic mode's sections (planner only): sec4 / sec16 = main 6f45acf with the ordered
# dQ's sections of 160 / 640 MB instead of 40 (more pairs per section, a pair's key blocks further apart in the
# order), head dim 128: CUPTI kernel times of the deterministic calls, three libraries alternating, two rounds.
A=.after-s36
python3 -c "
import lzma,pathlib
for n in ['main','sec4','sec16']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
for r in 1 2; do for lib in main sec4 sec16; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd det" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 90 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
grep -h "####\|== \|bwd_kernel" $OUT/kernels.txt | cut -c1-60
