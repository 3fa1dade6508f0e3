#!/bin/bash
# Carry .s68/main.so.xz, .s68/main.commit, .s68/hc.so.xz, .s68/hc.commit. Issue 25's d256
# deterministic rows: branch bwd-d256-half-counts (d256 for sm_90), whose ordered staged dQ counts
# a block's two halves apart (the counter's low and high 16 bits), so that a key block's first half
# waits only for its predecessors' first halves, which land about half a block before their second
# (dc.sh's deferred count lost 1-14%: the successors wait on the counts, so counts that come sooner
# should gain). First the d256 backward tests on it, then the d256 backward grid (--quick,
# deterministic column) against main (.s68/main.so.xz) in one process, torch FA2 and cuDNN beside
# them. A smaller DEADLINE cuts the later steps.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-570} ))
L=.s68/main.so.xz
export FLASHATTN_COMMIT=$(cat .s68/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib .s68/hc.so.xz --name bwd-hc \
    -k "256" --timeout 90 | tail -1
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 300 --compare hc:.s68/hc.so.xz \
    -- --hdims 256 --quick | tail -16
cd $OUT && tar czf all.tgz t b && rm -rf t b
