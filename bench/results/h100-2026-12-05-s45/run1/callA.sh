#!/bin/bash
# Session 45 call A (H200): main's library (g8 = 57581a6: RR and the backward planner's group-8 rule; later
# commits change no machine code) -- the GPU test files, then the forward, backward and features grids, two
# rounds each, torch FA2 and cuDNN interleaved in the same process: the top-level h200 records.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-570} ))
B=.after-s45
export FLASHATTN_COMMIT=$(cat $B/g8.commit)
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/g8.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/g8.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
G="python3 scripts/gpu.py --out $OUT/t"
for f in forward backward inference value_dim_sink; do $G pytest tests/gpu/test_$f.py --lib $B/g8.so --name $f --timeout 90; done
cat $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/g8.so --timeout 130 -- --rounds 2 | tail -2
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/g8.so --timeout 130 -- --rounds 2 | tail -2
python3 scripts/gpu.py --out $OUT/x bench features --lib $B/g8.so --timeout 60 -- --rounds 2 | tail -2
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && rm -rf t
