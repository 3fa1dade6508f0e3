#!/bin/bash
# Device call 5: Q in two buffers (branch fwd-q-double, head dims 64 and 128, arch 90) against main
# be2db36 in one process; its forward and sink tests, memcheck; and the edge timeline of the same
# change with the clock64 stamps (branch exp-qd-timeline, head dim 128).
export GPU_DEADLINE_AT=$(( $(date +%s) + 500 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("pdl", "qd", "qdtl"):
    with lzma.open(f".after-s33a/{name}.xz") as src, open(f".after-s33a/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s33a/qd.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=fwd-q-double
FLASHATTN_LIBRARY=$PWD/.after-s33a/qdtl.so PYTHONPATH=$PWD/python python3 .after-s33a/timeline.py > $OUT/timeline.txt 2>&1
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --compare main:.after-s33a/pdl.so --show 80 -- --hdims 64,128 --rounds 3
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds -k "not 192 and not 256"
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-mc --sanitize memcheck -k "d64_short or (dense and 128) or end_aligned or local_window or (varlen and 64)"
cat $OUT/f/summary.txt $OUT/timeline.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
