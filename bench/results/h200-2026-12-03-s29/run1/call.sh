#!/bin/bash
# Device call 1: the FMA exp2 variants against main (prebuilt libraries, 64;128, sm_90a).
export GPU_DEADLINE_AT=$(( $(date +%s) + 575 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=fwd-exp2-fma
python3 - <<'P'
import lzma, shutil, pathlib
for p in pathlib.Path('.after-exp').glob('*.so.xz'):
    with lzma.open(p) as src, open(p.with_suffix(''), 'wb') as dst: shutil.copyfileobj(src, dst)
    print(p.with_suffix(''), p.with_suffix('').stat().st_size)
P
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv
libs=""
for n in e3 main edge; do [ -f .after-exp/$n.so ] && libs="$libs --compare $n:.after-exp/$n.so"; done
python3 scripts/gpu.py --out $OUT bench forward --lib .after-exp/e2.so $libs --show 80 -- --quick --hdims 64,128 --rounds 3
python3 scripts/gpu.py --out $OUT pytest tests/gpu/test_forward.py --lib .after-exp/e3.so --name e3-forward
python3 scripts/gpu.py --out $OUT summary
