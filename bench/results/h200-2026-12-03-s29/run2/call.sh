#!/bin/bash
# Device call 2: the edge costs (tile decode by multiply-high, finish's division and log2) against main.
export GPU_DEADLINE_AT=$(( $(date +%s) + 575 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=fwd-edge-costs
python3 - <<'P'
import lzma, shutil, pathlib
for p in pathlib.Path('.after-exp').glob('*.so.xz'):
    with lzma.open(p) as src, open(p.with_suffix(''), 'wb') as dst: shutil.copyfileobj(src, dst)
P
python3 scripts/gpu.py --out $OUT bench forward --lib .after-exp/edge.so --compare main:.after-exp/main.so --show 80 -- --quick --hdims 64,128 --rounds 3
python3 scripts/gpu.py --out $OUT pytest tests/gpu/test_forward.py --lib .after-exp/edge.so --name edge-forward
python3 scripts/gpu.py --out $OUT summary
