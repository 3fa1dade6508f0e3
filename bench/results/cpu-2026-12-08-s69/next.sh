#!/bin/bash
# Carry .s69/main.so.xz, .s69/main.commit and .s69/{hc,red,st}.so.xz with their .commit files
# (build.sh beside this script makes them from main and the patches). Issue 25's d256 rows, three
# experiments in one process against main, interleaved, torch FA2 and cuDNN beside them:
#   hc  (hc.patch, branch bwd-d256-half-counts): the ordered staged dQ counts a block's two column
#       halves apart, so a key block's first half waits only for its predecessors' first halves
#       (the deterministic column);
#   red (red.patch, branch bwd-dkv-red-scalar): the backward's fp32 adds as explicit reductions
#       instead of atomicAdd, which compiled to ATOMG with a kept result (main's d256 Hopper unit:
#       1,600, the transposed dK / dV scratch adds of GQA causal 32/4; the mma.sync units' dQ pairs
#       in part); all REDG with the patch;
#   st  (red.patch + st.patch, branch bwd-dkv-staged-tma on red): d256's fp32 dK^T / dV^T of a CTA's last key
#       block to the scratch through K's and V's tiles by bulk tensor reductions (GQA default) or
#       stores (deterministic GQA's rows per head or pair), not element by element.
# First the d256 backward tests on all three and memcheck over st's new path, then the d256
# backward grid (--quick, deterministic column). A smaller DEADLINE cuts the later steps.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-570} ))
L=.s69/main.so.xz
export FLASHATTN_COMMIT=$(cat .s69/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
for v in hc red st; do
  python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib .s69/$v.so.xz --name bwd-$v \
      -k "256" --timeout 90 | tail -1
done
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib .s69/st.so.xz --name bwd-st-memcheck \
    --sanitize memcheck -k "256 and (gqa or varlen or deterministic_ordered_dq_gqa)" --timeout 120 | tail -1
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 360 --compare hc:.s69/hc.so.xz \
    --compare red:.s69/red.so.xz --compare st:.s69/st.so.xz -- --hdims 256 --quick | tail -16
cd $OUT && tar czf all.tgz t b && rm -rf t b
