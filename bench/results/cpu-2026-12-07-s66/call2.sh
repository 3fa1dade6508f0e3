#!/bin/bash
# Carry .s66. (1) main at d8a209b (the d256 80-key backward merged), all head dims for sm_90, built on
# the development machine (.s66/main.so.xz): tests/gpu's four suites with the planner's choices, and
# (last) the backward suite with the Hopper backward forced. (2) Issue 24's forward softmax
# experiment against that library (whose forward is main's: the merge changed no forward kernel),
# interleaved, torch FA2 and cuDNN beside them: d64 + d128 builds of branch fwd-softmax-ilp, each a
# setting of its two constants in fwd_kernel_sm90.cuh (kMaxChains: the row max in that many
# independent chains; kExpPolyEvery: every that-many-th exponential of an unmasked block by
# poly_exp2 on the FMA pipes): m4 = 4 chains, no polynomial; p4 = 4 chains, 1 in 4; p2 = 4 chains,
# 1 in 2. (3) The d64 / d128 forward tests on p2 and p4. With little device time left, a smaller
# DEADLINE cuts the later steps.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-570} ))
L=.s66/main.so.xz
export FLASHATTN_COMMIT=$(cat .s66/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py tests/gpu/test_backward.py tests/gpu/test_inference.py \
    tests/gpu/test_value_dim_sink.py --lib $L --timeout 100 | tail -2
python3 scripts/gpu.py --out $OUT/b bench forward --lib $L --timeout 220 \
    --compare m4:.s66/m4.so.xz --compare p4:.s66/p4.so.xz --compare p2:.s66/p2.so.xz \
    -- --hdims ${HDIMS:-64,128} ${BENCH_ARGS:---quick} | tail -30
for v in p2 p4; do
  python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib .s66/$v.so.xz --name fwd-$v -k "(dense or running_max or d64_ or diagonal) and not 256" --timeout 30 | tail -1
done
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $L --overrides backward_kernel=sm90 \
    --name bwd-sm90 --timeout 30 | tail -2
