#!/bin/bash
# Carry .s68 (cutlass.tgz, the pinned CUTLASS headers; main.commit, written as `git rev-parse HEAD >
# .s68/main.commit` before the call). Builds main (the tree: dQ before dK in the Hopper backward) on
# the device for sm_90 at every head dim (build-main, kept on a warm machine for the next call), then
# tests/gpu's four suites with the planner's choices, then the backward suite with the Hopper
# backward forced. A smaller DEADLINE cuts the later steps.
D=.s68
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-560} )) FLASHATTN_COMMIT=$(cat $D/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
[ -d third_party/cutlass ] || tar xzf $D/cutlass.tgz
[ -f build-main/src/libflashattn.so ] || python3 scripts/gpu.py --out $OUT/k build --name main --build-dir build-main \
    --archs 90 --timeout 330 | tail -1
L=build-main/src/libflashattn.so
[ -f $L ] || { echo "the build failed"; exit 1; }
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py tests/gpu/test_backward.py tests/gpu/test_inference.py \
    tests/gpu/test_value_dim_sink.py --lib $L --timeout 300 | tail -2
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $L --overrides backward_kernel=sm90 \
    --name bwd-sm90 --timeout 150 | tail -2
