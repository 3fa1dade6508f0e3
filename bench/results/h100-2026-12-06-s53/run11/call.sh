#!/bin/bash
# Session 53 exp 11. The d128 forward's tile timeline (measuring builds, d128 only, main's kernel of 6a8ccff
# plus clock64 stamps): tl6 = exp 10's tl4 (Q first, stamps around thread 0's wait for the first K block's
# stage) with Q by TMA from thread 32 at every length (main: from 8k keys; the other producer threads
# then leave the loop).
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['tl6.so']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
for n in tl6; do
  echo "######## $n"
  TL_NAME=$n FLASHATTN_LIBRARY=$PWD/$B/$n.so PYTHONPATH=$PWD/python timeout 120 python3 $B/timeline.py 2>&1 | tee $OUT/timeline-$n.txt | grep -E "==|producer|relative|consumer 0"
done
