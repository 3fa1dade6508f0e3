#!/bin/bash
# call2.sh cut to what fits the session's last device minutes (carry .s66): main's forward and
# backward GPU suites, the forward experiment's benchmark (m4 / p4 / p2 against main), p4's tests.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
L=.s66/main.so.xz
export FLASHATTN_COMMIT=$(cat .s66/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py tests/gpu/test_backward.py --lib $L --timeout 60 | tail -1
python3 scripts/gpu.py --out $OUT/b bench forward --lib $L --timeout 200 \
    --compare m4:.s66/m4.so.xz --compare p4:.s66/p4.so.xz --compare p2:.s66/p2.so.xz \
    -- --hdims ${HDIMS:-64,128} ${BENCH_ARGS:---quick} | tail -30
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib .s66/p4.so.xz --name fwd-p4 -k "(dense or running_max or d64_ or diagonal) and not 256" --timeout 30 | tail -1
