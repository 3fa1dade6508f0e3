#!/bin/bash
# Device call 3: main 3bc31d1 (the tile counter's clearing kernel; head dims 64, 128, 192 (with the
# 192 / 128 value-dim instance) and 256, arch 90): the forward, value-dim / sink and CUDA-graph tests,
# memcheck over the causal and claimed-tile cases of every head dim, and the full forward grid (the
# top-level h200-forward), two rounds.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=3bc31d1
python3 - <<'P'
import lzma, shutil
with lzma.open(".after-s33a/full.xz") as src, open(".after-s33a/full.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s33a/full.so
G="python3 scripts/gpu.py --out $OUT"
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds
$G pytest tests/python/test_cuda_graphs.py --lib $L --name graphs
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-mc --sanitize memcheck -k "(dense and causal and not 512 and not 1024) or d64_short or lone_tiles or local_window or end_aligned"
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds-mc --sanitize memcheck -k "192_128 and not backward"
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --show 70 -- --rounds 2
cat $OUT/f/summary.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
