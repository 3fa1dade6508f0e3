#!/bin/bash
# Carry .s68/main.so.xz, .s68/main.commit, .s68/dc.so.xz, .s68/dc.commit. Issue 25's d256
# deterministic rows (deterministic / default 0.81-0.83 at causal 4k-16k on the H100, call2.sh):
# branch bwd-d256-deferred-count (d256 for sm_90), whose ordered staged dQ releases the Q stage once
# its reductions have read it and counts each block only after issuing the next block's first half
# (its writes by then long landed), so that the dQ thread's loop no longer waits for every block's
# writes before the next block's reductions and the consumers' region (session 68's profile: the
# thread's largest waits are that completion, then the half's read, then the turn; the consumers'
# the region, extra_read). First the d256 backward tests on it, then the d256 backward grid
# (--quick, deterministic column) against main (.s68/main.so.xz) in one process, torch FA2 and
# cuDNN beside them. A smaller DEADLINE cuts the later steps.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-570} ))
L=.s68/main.so.xz
export FLASHATTN_COMMIT=$(cat .s68/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib .s68/dc.so.xz --name bwd-dc \
    -k "256" --timeout 90 | tail -1
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 300 --compare dc:.s68/dc.so.xz \
    -- --hdims 256 --quick | tail -16
cd $OUT && tar czf all.tgz t b && rm -rf t b
