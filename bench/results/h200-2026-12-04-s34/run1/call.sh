#!/bin/bash
# Device call 1: main 5d9923c (head dims 64, 128): forward and sink tests (acec850 / c9b1f21 not yet
# run on the H200); bench against 120b590 (two Q buffers at d64 as well, Q descriptors per S); clocks
# and power while ours, cuDNN and the matmul run back to back.
export GPU_DEADLINE_AT=$(( $(date +%s) + 540 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("main", "qd"):
    with lzma.open(f".after-s34a/{name}.xz") as src, open(f".after-s34a/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s34a/main.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=5d9923c
FLASHATTN_LIBRARY=$PWD/$L PYTHONPATH=$PWD/python timeout 150 python3 .after-s34a/power.py > $OUT/power.txt 2>&1
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds -k "not 192 and not 256"
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --compare qd:.after-s34a/qd.so --show 80 -- --hdims 64,128 --rounds 3
cat $OUT/f/summary.txt $OUT/power.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
