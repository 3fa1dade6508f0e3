#!/bin/bash
# Session 53 exp 8. The d128 forward's tile timeline (measuring builds, d128 only, main's kernel of 6a8ccff
# plus clock64 stamps): tl1 adds a producer stamp after the Q copies; tl2 = tl1 + a __syncwarp() at the end
# of each producer tile (warp 0's other threads wait there for the TMA thread instead of in the next tile's
# q_empty wait, a divergent path of the same warp).
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['tl1.so','tl2.so']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
for n in tl1 tl2; do
  echo "######## $n"
  TL_NAME=$n FLASHATTN_LIBRARY=$PWD/$B/$n.so PYTHONPATH=$PWD/python timeout 120 python3 $B/timeline.py 2>&1 | tee $OUT/timeline-$n.txt | grep -E "==|producer|relative|consumer 0"
done
