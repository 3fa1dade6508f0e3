#!/bin/bash
# Device call: main 75a4971 (and its test of the end-aligned tiles) (the end-aligned tiles merged; every head dim, archs 90): the forward
# and value-dim / sink GPU tests, memcheck over the causal cases of every head dim's forward, and
# the full forward grid (the top-level h200-forward).
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=75a4971
python3 - <<'P'
import lzma, shutil
with lzma.open(".after-s31e/main.xz") as src, open(".after-s31e/main.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s31e/main.so
G="python3 scripts/gpu.py --out $OUT"
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-mc --sanitize memcheck -k "(dense and causal and not 512 and not 1024) or d64_short or lone_tiles or local_window or end_aligned"
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --show 70
cat $OUT/f/summary.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
