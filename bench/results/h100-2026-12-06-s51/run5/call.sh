# The command as it ran twice (run tool, kind nvidia-h200, carry .after-s51; the first time with DEADLINE 490 and
# the backward grid between the two benches): both times an H100 came and it stopped at once.
#!/bin/bash
# Session 51 run 5 (only on an H200; on any other card it stops at once): main's top-level
# records by the balanced order, those that fit the device time left: the forward grid and the features bench,
# each kept as it completes.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
B=.after-s51
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || { echo "not an H200: stopped"; exit 0; }
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/m.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 240 | tail -1
(cd $OUT && tar czf f.tgz f && rm -rf f)
python3 scripts/gpu.py --out $OUT/x bench features --lib $B/m.so --timeout 150 | tail -1
(cd $OUT && tar czf x.tgz x && rm -rf x)
