#!/bin/bash
# Session 36 call 4: (a) per-item stamps of the persistent backward (st: p2 + clock64 stamps, head dim 128);
# (b) mp = main + the ordered dQ's arrivals after the next block's reductions, against main: CUPTI kernel
# times (two rounds alternating).
A=.after-s36
python3 -c "
import lzma,pathlib
for n in ['main','mp','st']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
FLASHATTN_LIBRARY=$PWD/$A/st.so PYTHONPATH=$PWD/python timeout 120 python3 $A/pstamps.py $PWD/$A/st.so > $OUT/stamps.txt 2>&1
cat $OUT/stamps.txt | grep -v Warn
for r in 1 2; do for lib in main mp; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 90 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
grep -h "####\|== \|bwd_kernel" $OUT/kernels.txt | cut -c1-60
