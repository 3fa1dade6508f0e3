#!/bin/bash
# Device call: issue 27's features bench on main c3a52fe (its library: c8cc5ab with the claim rule,
# every head dim, archs 90): 192 / 128 against cuDNN and sinks on / off at d128, forward and backward.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=c3a52fe
python3 - <<'P'
import lzma, shutil
with lzma.open(".after-s30g/main.xz") as src, open(".after-s30g/main.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
python3 scripts/gpu.py --out $OUT bench features --lib .after-s30g/main.so --show 40 -- --quick --rounds 3
python3 scripts/gpu.py --out $OUT summary
