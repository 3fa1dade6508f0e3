#!/bin/bash
# Session 53 exp 10. The d128 forward's tile timeline (measuring builds, d128 only, main's kernel of 6a8ccff
# plus clock64 stamps): tl4 = exp 8's tl1 with stamps around thread 0's wait for the first K block's stage;
# tl5 = tl4 with the first K block issued before Q's copies (exp 9's kf).
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['tl4.so','tl5.so']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
for n in tl4 tl5; do
  echo "######## $n"
  TL_NAME=$n FLASHATTN_LIBRARY=$PWD/$B/$n.so PYTHONPATH=$PWD/python timeout 120 python3 $B/timeline.py 2>&1 | tee $OUT/timeline-$n.txt | grep -E "==|producer|relative|consumer 0"
done
