#!/bin/bash
# Device call 1: the tile counter cleared by a kernel the forward depends on programmatically
# (branch fwd-pdl-clear be2db36) against main ac1e4c1, both head dims 64 and 128, arch 90, in one
# process; the branch's forward tests, CUDA-graph tests, memcheck over claimed-tile cases.
export GPU_DEADLINE_AT=$(( $(date +%s) + 500 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("main", "pdl"):
    with lzma.open(f".after-s33a/{name}.xz") as src, open(f".after-s33a/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s33a/pdl.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=fwd-pdl-clear
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --compare main:.after-s33a/main.so --show 80 -- --hdims 64,128 --rounds 3
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
$G pytest tests/python/test_cuda_graphs.py --lib $L --name graphs
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-mc --sanitize memcheck -k "d64_short or end_aligned or (varlen and 64) or (gqa and causal)"
FLASHATTN_LIBRARY=.after-s33a/main.so python3 bench/results/h200-2026-12-03-s33/run1/waves.py 2>&1 | tee $OUT/waves.txt
cat $OUT/f/summary.txt $OUT/waves.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
