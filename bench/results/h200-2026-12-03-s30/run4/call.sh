#!/bin/bash
# Device call: the full forward grid of the forward branch at its end (fwd-consumer-ranges c8cc5ab,
# every head dim, archs 90; the code merged into main), against torch's FA2 and cuDNN.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=c8cc5ab
python3 - <<'P'
import lzma, shutil
with lzma.open(".after-s30d/fwd2.xz") as src, open(".after-s30d/fwd2.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
python3 scripts/gpu.py --out $OUT bench forward --lib .after-s30d/fwd2.so --show 70
python3 scripts/gpu.py --out $OUT summary
