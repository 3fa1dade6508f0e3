#!/bin/bash
# Session 52 exp 9. x = branch fwd-q-tma-long (every head dim), the test extended to every tile
# form (d64 / d128 / d192 / 192-128 / d256) past 8k keys; memcheck over it.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-200} ))
B=.after-s52
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/x.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/x.so.xz').read_bytes()))"
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x --timeout 60 -k "q_by_tma"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x-memcheck --sanitize memcheck --timeout 100 -k "q_by_tma"
cat $OUT/t/summary.txt
cd $OUT && tar czf all.tgz t && rm -rf t
