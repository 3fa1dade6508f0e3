#!/bin/bash
# Carry .s66/main.so.xz, .s66/main.commit and .s66/bp4.so.xz. main at d8a209b (the d256 80-key
# backward merged; .s66/main.so.xz, every head dim for sm_90): tests/gpu's four suites with the
# planner's choices, then the backward suite with the Hopper backward forced; then session 66's
# backward softmax experiment (bp4 against main, call4.sh's bench) if time is left. A smaller
# DEADLINE cuts the later steps.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-560} ))
L=.s66/main.so.xz
export FLASHATTN_COMMIT=$(cat .s66/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py tests/gpu/test_backward.py tests/gpu/test_inference.py \
    tests/gpu/test_value_dim_sink.py --lib $L --timeout 150 | tail -2
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $L --overrides backward_kernel=sm90 \
    --name bwd-sm90 --timeout 60 | tail -2
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 300 --compare bp4:.s66/bp4.so.xz \
    -- --hdims ${HDIMS:-64,128} ${BENCH_ARGS:---quick} | tail -30
