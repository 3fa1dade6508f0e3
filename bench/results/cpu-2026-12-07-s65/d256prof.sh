#!/bin/bash
# .s65/l256.so.xz: as d256.sh says.
# The d256 backward at 80-key blocks after the fix of its dK/dV scratch store: the d256 backward
# tests again, then Nsight Compute's source counters over the new kernel and main's 64-key one
# (.after-s62/f.so.xz) at d256 4k non-causal and 1k causal, for bench/ncu_stalls.py: where the
# 80-key schedule waits (dO's one stage, the region's release before P). Carry .s65, .after-s62.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-570} ))
export FLASHATTN_COMMIT=$(cat .s65/l256.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib .s65/l256.so.xz -k "${TESTS:-256}" --timeout 200
python3 scripts/gpu.py --out $OUT/p profile backward --lib .s65/l256.so.xz --shapes "${SHAPES:-d256n4k d256c1k}" \
    --impls "ours_sm90" --export new --timeout 150
FLASHATTN_COMMIT=$(cat .after-s62/f.commit) python3 scripts/gpu.py --out $OUT/p profile backward --lib .after-s62/f.so.xz \
    --shapes "${SHAPES:-d256n4k d256c1k}" --impls "ours_sm90" --export main --timeout 150
rm -f $OUT/p/*.ncu-rep
cd $OUT && tar czf d256prof.tgz t p && rm -rf t p
