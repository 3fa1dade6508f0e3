#!/bin/bash
# Carry .s66/main.so.xz, .s66/main.commit and .s67/dqf.so.xz. Issue 25's backward experiment: dqf
# (.s67/dqf.so.xz; branch bwd-dq-first, 3fc5a89, d64 + d128 for sm_90): the Hopper backward issues
# dQ = dS K before dK += dS^T Q, so that dK runs on the tensor cores while each consumer hands its
# dQ off (main: dK first, then dQ, then a wait for both, then the hand-off with nothing of the
# consumer's in flight, in both consumers at once since they meet at the dS barrier every block).
# First its backward tests at d64 / d128 (default and deterministic modes, GQA walks), then the
# backward grid at d64 / d128 (--quick) against main at d8a209b (.s66/main.so.xz) in one process,
# interleaved, torch FA2 and cuDNN beside them, with the deterministic column. A smaller DEADLINE
# cuts the later steps.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-560} ))
L=.s66/main.so.xz
export FLASHATTN_COMMIT=$(cat .s66/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib .s67/dqf.so.xz --name bwd-dqf \
    -k "not 256 and not 192 and not 96 and not 32 and not 160 and not 224" --timeout 120 | tail -1
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 380 --compare dqf:.s67/dqf.so.xz \
    -- --hdims ${HDIMS:-64,128} ${BENCH_ARGS:---quick} | tail -30
