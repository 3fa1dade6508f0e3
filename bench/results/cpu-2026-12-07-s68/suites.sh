#!/bin/bash
# Carry .s68/main.so.xz and .s68/main.commit (main's library, every head dim, sm_90, built here).
# tests/gpu's four suites with the planner's choices, then the backward suite with the Hopper
# backward forced: the full GPU suites on main with dQ before dK in the Hopper backward. A smaller
# DEADLINE cuts the later steps.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-570} ))
L=.s68/main.so.xz
export FLASHATTN_COMMIT=$(cat .s68/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py tests/gpu/test_backward.py tests/gpu/test_inference.py \
    tests/gpu/test_value_dim_sink.py --lib $L --timeout 330 | tail -2
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $L --overrides backward_kernel=sm90 \
    --name bwd-sm90 --timeout 170 | tail -2
