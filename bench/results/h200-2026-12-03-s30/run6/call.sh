#!/bin/bash
# Device call: tiles claimed from the counter also where they end past their sequence (planner change
# on main's code: c8cc5ab + the claim rule), against main (fwd2), d64 rows in one process; the forward
# GPU tests on it and memcheck of the varlen and short d64 cases.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=claim-ragged
python3 - <<'P'
import lzma, shutil
for name in ("main", "claim"):
    with lzma.open(f".after-s30f/{name}.xz") as src, open(f".after-s30f/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
G="python3 scripts/gpu.py --out $OUT"
$G bench forward --lib .after-s30f/claim.so --compare main:.after-s30f/main.so --show 14 -- --hdims 64 --shapes mha --rounds 3
$G pytest tests/gpu/test_forward.py --lib .after-s30f/claim.so --name fwd
$G pytest tests/gpu/test_forward.py --lib .after-s30f/claim.so --name fwd-mc --sanitize memcheck -k "d64_short or varlen"
$G summary
