# The command as it ran (run tool, carry .after-s51, the H100 of run 5 still warm): DEADLINE=420 bash .after-s51/run6.sh
#!/bin/bash
# Session 51 run 6: the A/A of run 2 by --alternate 3 (three calls a turn between CUDA events, 20 turns
# each at the least), in the same mirrored order after the lead-in.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-570} ))
B=.after-s51
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/m.so.xz').read_bytes()))"
cp $B/m.so $B/a.so
export FLASHATTN_COMMIT=$(cat $B/m.commit)
G="--shapes mha,gqa --hdims 128 --seqlens 1024,4096,16384"
for d in forward backward; do
  python3 scripts/gpu.py --out $OUT/$d-alt bench $d --lib $B/m.so --compare a:$B/a.so --timeout 200 -- $G --alternate 3 | tail -1
done
cd $OUT && tar czf all.tgz *-alt && rm -rf *-alt
