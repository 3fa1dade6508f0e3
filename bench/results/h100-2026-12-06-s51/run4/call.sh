# The command as it ran (run tool, carry .after-s51, the same warm H100): bash .after-s51/run4.sh
#!/bin/bash
# Session 51 run 4: main's backward grid (60 rows, with the deterministic column), timed in the
# mirrored balanced order after a lead-in, torch FA2 and cuDNN in the process.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s51
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/m.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/m.so --timeout 560 | tail -1
cd $OUT && tar czf all.tgz b && rm -rf b
