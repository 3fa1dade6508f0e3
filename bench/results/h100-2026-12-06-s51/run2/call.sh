# The command as it ran (run tool, kind nvidia-h200 (an H100 came), carry .after-s51): bash .after-s51/run2.sh
#!/bin/bash
# Session 51 run 2: the A/A again (as run 1's "new"), timed in the mirrored balanced order after a
# lead-in of LEAD_IN_S, do_bench turns of 5 + 25 ms.
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
  python3 scripts/gpu.py --out $OUT/$d-mirror bench $d --lib $B/m.so --compare a:$B/a.so --timeout 200 -- $G | tail -1
done
cd $OUT && tar czf all.tgz *-mirror && rm -rf *-mirror
