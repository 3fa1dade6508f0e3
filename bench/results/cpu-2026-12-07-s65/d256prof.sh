#!/bin/bash
# .s65/l256.so.xz: a d256-only build of branch d256-80key-backward, made on the development machine:
#   git worktree add /tmp/wt d256-80key-backward && cmake -S /tmp/wt -B /tmp/b256 -G Ninja \
#     -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS=90 -DFLASHATTN_HEADDIMS=256 \
#     -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_TOOLS=OFF -DFLASHATTN_BUILD_EXAMPLES=OFF \
#   && ninja -C /tmp/b256 flashattn && xz -c /tmp/b256/src/libflashattn.so.0.1.0 > .s65/l256.so.xz
#   (and the branch's commit into .s65/l256.commit)
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
