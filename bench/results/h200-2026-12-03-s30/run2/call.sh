#!/bin/bash
# Device call: the forward's consumers computing only their rows' key blocks (branch
# fwd-consumer-ranges; every head dim, archs 90) against main 5390758, in one process: the
# planner's tiles (rows) and, as r192, the same with the 192-row tile also for short causal d64
# problems; the branch's forward GPU tests and memcheck.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=fwd-consumer-ranges
python3 - <<'P'
import lzma, shutil
for name in ("rows", "r192"):
    with lzma.open(f".after-s30b/{name}.xz") as src, open(f".after-s30b/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s30b/rows.so
test -f .after-s30a/main.so || { echo "no main.so"; exit 3; }
G="python3 scripts/gpu.py --out $OUT"
$G bench forward --lib $L --compare main:.after-s30a/main.so --compare r192:.after-s30b/r192.so --show 70 -- --quick --seqlens 1024,2048,4096,16384 --rounds 3
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds -k "not backward"
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-mc --sanitize memcheck -k "d64_short or local_window or (varlen and 64)"
$G summary
