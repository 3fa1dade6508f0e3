#!/bin/bash
# Device call 6: the tile edge's third version with a ring of four tile slots (branch
# fwd-edge-overlap e4; head dims 64 and 128, arch 90) against main 97d4f98 (head dim 128 and 64
# libraries) in one process each; the branch's forward GPU tests (other head dims fail: not built).
export GPU_DEADLINE_AT=$(( $(date +%s) + 400 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("main", "main128", "edge4"):
    with lzma.open(f".after-s32a/{name}.xz") as src, open(f".after-s32a/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s32a/edge4.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=fwd-edge-overlap-4slots
python3 scripts/gpu.py --out $OUT/f128 bench forward --lib $L --compare main:.after-s32a/main128.so --show 40 -- --hdims 128 --rounds 3
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
python3 scripts/gpu.py --out $OUT/f64 bench forward --lib $L --compare main:.after-s32a/main.so --show 12 -- --hdims 64 --rounds 3
cat $OUT/f64/summary.txt $OUT/f128/summary.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
