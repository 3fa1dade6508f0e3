#!/bin/bash
# Carry .s68/main.so.xz, .s68/main.commit, .s68/arr.so.xz. Experiment (branch fwd-warp-arrivals,
# d64 + d128 for sm_90): the consumers of the Hopper forward and backward arrive on their mbarriers
# (the K / V / Q stages' releases; the backward's dQ hand-off, dO, staged-dQ and K/V releases) once
# per warp, lane 0 after __syncwarp, instead of once per thread (FlashAttention-3 / CUTLASS's
# pipelines arrive once per consumer warpgroup). Against main (.s68/main.so.xz, every head dim) in
# one process, interleaved, torch FA2 and cuDNN beside them: the forward grid at d64 / d128, then
# the experiment's forward and backward tests (d64 / d128), then the backward grid at d128 with the
# deterministic column. A smaller DEADLINE cuts the later steps.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-570} ))
L=.s68/main.so.xz
export FLASHATTN_COMMIT=$(cat .s68/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --timeout 200 --compare arr:.s68/arr.so.xz \
    -- --hdims ${FWD_HDIMS:-64,128} --quick | tail -30
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib .s68/arr.so.xz --name fwd-arr \
    -k "not 256 and not 192 and not 96 and not 32 and not 160 and not 224" --timeout 60 | tail -1
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib .s68/arr.so.xz --name bwd-arr \
    -k "not 256 and not 192 and not 96 and not 32 and not 160 and not 224" --timeout 100 | tail -1
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 200 --compare arr:.s68/arr.so.xz \
    -- --hdims ${BWD_HDIMS:-128} --quick | tail -30
