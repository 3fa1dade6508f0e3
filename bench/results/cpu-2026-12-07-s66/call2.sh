#!/bin/bash
# Carry .s66. (1) main at d8a209b (the d256 80-key backward merged), all head dims for sm_90, built on
# the development machine (.s66/main.so.xz): tests/gpu's four suites with the planner's choices and
# the backward suite with the Hopper backward forced. (2) fwdexp.sh's forward experiment against that
# library (whose forward is main's: the merge changed no forward kernel): m4, p4 and p2 (d64 + d128
# builds of branch fwd-softmax-ilp, fwdexp.sh's header says what each is) interleaved with it, torch
# FA2 and cuDNN. (3) The d64 / d128 forward tests on p2 and p4.
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
