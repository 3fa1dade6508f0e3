#!/bin/bash
# Carry .s68/main.so.xz, .s68/main.commit, .s68/hc.so.xz, .s68/hc.commit, .s68/red.so.xz,
# .s68/red.commit (rebuild what is gone: main from main, the others from their branches, d256 for
# sm_90). Issue 25's d256 rows, two experiments in one process against main, interleaved, torch FA2
# and cuDNN beside them:
#   hc  (branch bwd-d256-half-counts, b353d5f's code): the ordered staged dQ counts a block's two
#       column halves apart, so a key block's first half waits only for its predecessors' first
#       halves (the deterministic column);
#   red (branch bwd-dkv-red-scalar, f781f4a): the backward's fp32 adds as explicit reductions
#       instead of atomicAdd, which compiled to ATOMG with a kept result (main's d256 Hopper unit:
#       1,600, the transposed dK / dV scratch adds of GQA causal 32/4; the mma.sync units' dQ pairs
#       in part); all REDG on the branch.
# First the d256 backward tests on both, then the d256 backward grid (--quick, deterministic
# column). A smaller DEADLINE cuts the later steps.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-570} ))
L=.s68/main.so.xz
export FLASHATTN_COMMIT=$(cat .s68/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for v in hc red; do
  python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib .s68/$v.so.xz --name bwd-$v \
      -k "256" --timeout 90 | tail -1
done
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 360 --compare hc:.s68/hc.so.xz \
    --compare red:.s68/red.so.xz -- --hdims 256 --quick | tail -16
cd $OUT && tar czf all.tgz t b && rm -rf t b
