#!/bin/bash
# The backward's half of the softmax experiment (carry .s66): bp4 (branch fwd-softmax-ilp with main
# merged, d64 + d128 for sm_90: the forward at p4, and every 4th exponential of an unmasked block of
# the Hopper backward's P = exp2(S - lse) by poly_exp2, kBwdExpPolyEvery in bwd_kernel_sm90.cuh)
# against main's library (.s66/main.so.xz) interleaved, torch FA2 and cuDNN beside them, at d64 and
# d128 (MHA and GQA, --quick); then bp4's d64 / d128 backward tests.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-560} ))
L=.s66/main.so.xz
export FLASHATTN_COMMIT=$(cat .s66/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 400 --compare bp4:.s66/bp4.so.xz \
    -- --hdims ${HDIMS:-64,128} ${BENCH_ARGS:---quick} | tail -30
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib .s66/bp4.so.xz --name bwd-bp4 \
    -k "not 256 and not 192 and not 96 and not 32 and not 160 and not 224" --timeout 60 | tail -1
