#!/bin/bash
# Device call 2: the rows' factors and lse taken under the last P V, and the next tile decoded there on
# the static schedule (branch fwd-early-rows, head dims 64 and 128, arch 90) against main be2db36 in
# one process; the branch's forward and sink tests, memcheck over masked, short and sink cases.
export GPU_DEADLINE_AT=$(( $(date +%s) + 500 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("pdl", "early"):
    with lzma.open(f".after-s33a/{name}.xz") as src, open(f".after-s33a/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s33a/early.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=fwd-early-rows
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --compare main:.after-s33a/pdl.so --show 80 -- --hdims 64,128 --rounds 3
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-mc --sanitize memcheck -k "d64_short or (dense and 128) or local_window or (varlen and 128)"
cat $OUT/f/summary.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
