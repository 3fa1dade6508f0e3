# The command as it ran (run tool, kind nvidia-h200 (an H100 came), carry .after-s51 with m.so.xz, m.commit and
# bench-old/ = bench/ of c56684b: git archive c56684b bench), twice: 'bash .after-s51/run1.sh' (its
# forward-new files did not come back: more files than the tool returns) and 'DIRS=forward bash .after-s51/run1.sh'.
#!/bin/bash
# Session 51 run 1: the grids' timing, A/A. main's library (m.so) as ours and again as "a" (a second
# handle on a copy of the same file: identical code), d128 MHA and GQA 64/8 at 1k / 4k / 16k, causal
# and not; backward and forward, each by the records' former method (best of two round-robin
# rounds, bench-old/: main before the change) and by balanced do_bench turns after a lead-in (main).
# Any ours / a other than 1 is the method's.
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
for d in ${DIRS:-backward forward}; do
  start=$(date +%s)
  FLASHATTN_LIBRARY=$PWD/$B/m.so PYTHONPATH=$PWD/python:$PWD/tests/gpu PYTHONUNBUFFERED=1 timeout 110 \
    python3 $B/bench-old/gpu_$d.py --out $OUT/$d-old --lib a:$B/a.so $G --rounds 2 > $OUT/$d-old.log 2>&1
  echo "$d old: rc=$? $(( $(date +%s) - start )) s"
  python3 scripts/gpu.py --out $OUT/$d-new bench $d --lib $B/m.so --compare a:$B/a.so --timeout 150 -- $G | tail -2
done
cd $OUT && tar czf all.tgz *-old *-new && rm -rf *-old *-new
