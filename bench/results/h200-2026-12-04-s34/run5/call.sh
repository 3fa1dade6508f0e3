#!/bin/bash
# Device call 5: main d9546fd, every head dim: the forward, backward and feature tests, memcheck over
# the forward's d64 / d128 cases, the full forward and backward grids over two rounds (the top-level
# files); rowsum = branch bwd-rowsum-inflight (head dim 128): test_backward's d128 and deterministic
# cases, and its backward kernels' times against main's (kernels.py, 1k).
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("full", "rowsum"):
    with lzma.open(f".after-s34a/{name}.xz") as src, open(f".after-s34a/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s34a/full.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=d9546fd
for lib in full rowsum; do
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/.after-s34a/$lib.so PYTHONPATH=$PWD/python timeout 60 python3 .after-s34a/kernels.py > $OUT/kernels-$lib.txt 2>&1
done
$G pytest tests/gpu/test_backward.py --lib .after-s34a/rowsum.so --name bwd-rowsum -k "128 or determin"
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --show 3 -- --rounds 2
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --show 3 -- --rounds 2
$G pytest tests/gpu/test_backward.py --lib $L --name bwd
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-mc --sanitize memcheck -k "(dense and 128 and causal) or d64_short or end_aligned"
cat $OUT/f/summary.txt $OUT/b/summary.txt >> $OUT/summary.txt
grep -h "==\|row_sum\|dsum\|bwd_kernel" $OUT/kernels-*.txt | cut -c1-120 >> $OUT/summary.txt
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
