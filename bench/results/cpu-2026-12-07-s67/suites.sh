#!/bin/bash
# Carry .s68/main.so.xz and .s68/main.commit: main at 3f4cc1e or later (dQ before dK in the Hopper
# backward), every head dim for sm_90, built on the development machine. tests/gpu's four suites with
# the planner's choices, then the backward suite with the Hopper backward forced. A smaller DEADLINE
# cuts the later steps.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-560} ))
L=.s68/main.so.xz
export FLASHATTN_COMMIT=$(cat .s68/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py tests/gpu/test_backward.py tests/gpu/test_inference.py \
    tests/gpu/test_value_dim_sink.py --lib $L --timeout 300 | tail -2
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $L --overrides backward_kernel=sm90 \
    --name bwd-sm90 --timeout 150 | tail -2
