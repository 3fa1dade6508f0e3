#!/bin/bash
# Session 53 exp 3. Does exp 1's +3.5% at 8k-16k without a mask repeat? m = main (every head dim) as ours;
# x = exp 1's library (records published after a tile's loads), x1 = exp 2's (after its first loads),
# x2 = main with the 56 / 224 register split only; all d128. d128 forward at 1k / 8k / 16k, --alternate 3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','x.so','x1.so','x2.so']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 400 -- --hdims 128 --seqlens 1024,8192,16384 --alternate 3 --lib x:$B/x.so --lib x1:$B/x1.so --lib x2:$B/x2.so | tail -20
cd $OUT && tar czf all.tgz f && rm -rf f
