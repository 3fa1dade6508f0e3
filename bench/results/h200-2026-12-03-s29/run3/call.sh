#!/bin/bash
# Device call 4: the product waits after the exponentials (EF: forward P V, backward dP) and the
# edge costs (edge) against main.
export GPU_DEADLINE_AT=$(( $(date +%s) + 580 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=pv-wait
python3 - <<'P'
import lzma, shutil, pathlib
for p in pathlib.Path('.after-exp').glob('*.so.xz'):
    with lzma.open(p) as src, open(p.with_suffix(''), 'wb') as dst: shutil.copyfileobj(src, dst)
P
python3 scripts/gpu.py --out $OUT bench forward --lib .after-exp/EF.so --compare main:.after-exp/main.so --compare edge:.after-exp/edge.so --show 30 -- --quick --hdims 64,128 --rounds 3
mkdir -p $OUT/fwd && mv $OUT/h200-forward.* $OUT/fwd/ 2>/dev/null
python3 scripts/gpu.py --out $OUT bench backward --lib .after-exp/EF.so --compare main:.after-exp/main.so --show 30 -- --quick --hdims 64,128 --rounds 3
python3 scripts/gpu.py --out $OUT pytest tests/gpu/test_forward.py --lib .after-exp/EF.so --name EF-forward
python3 scripts/gpu.py --out $OUT pytest tests/gpu/test_backward.py --lib .after-exp/EF.so --name EF-backward
python3 scripts/gpu.py --out $OUT pytest tests/gpu/test_forward.py --lib .after-exp/edge.so --name edge-forward
python3 scripts/gpu.py --out $OUT summary
