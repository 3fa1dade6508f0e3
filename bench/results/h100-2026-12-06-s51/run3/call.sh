# The command as it ran (run tool, carry .after-s51, the H100 of run 2 still warm): bash .after-s51/run3.sh
#!/bin/bash
# Session 51 run 3: main's forward grid (60 rows) and the features bench, timed in the mirrored
# balanced order after a lead-in (bench_common.balanced_means), torch FA2 and cuDNN in the process.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s51
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/m.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 330 | tail -1
python3 scripts/gpu.py --out $OUT/x bench features --lib $B/m.so --timeout 220 | tail -1
cd $OUT && tar czf all.tgz f x && rm -rf f x
