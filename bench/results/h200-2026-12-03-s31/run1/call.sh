#!/bin/bash
# Device call: the key mask as bits (branch mask-bits; every head dim, archs 90) against main
# c3a52fe in one process: the forward and backward grids at d64 / d128 / d256; the GPU tests of
# every kernel that masks (the Hopper and mma.sync forwards and backwards, the inference kernels),
# and memcheck over the masked forward tests.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("main", "bits"):
    with lzma.open(f".after-s31a/{name}.xz") as src, open(f".after-s31a/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
M=.after-s31a/main.so; L=.after-s31a/bits.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=mask-bits
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --compare main:$M --show 70 -- --quick --rounds 3
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-sm80 --overrides forward_kernel=sm80 -k "causal or local or window"
$G pytest tests/gpu/test_inference.py --lib $L --name inf
$G pytest tests/gpu/test_backward.py --lib $L --name bwd
$G pytest tests/gpu/test_backward.py --lib $L --name bwd-sm80 --overrides backward_kernel=sm80 -k "causal or local or window"
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-mc --sanitize memcheck -k "d64_short or (causal and 128) or local_window"
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --compare main:$M --show 70 -- --quick --hdims 128,256 --rounds 2
cat $OUT/f/summary.txt $OUT/b/summary.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
