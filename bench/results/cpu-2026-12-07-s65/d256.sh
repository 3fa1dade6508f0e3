#!/bin/bash
# .s65/l256.so.xz: a d256-only build of branch d256-80key-backward, made on the development machine:
#   git worktree add /tmp/wt d256-80key-backward && cmake -S /tmp/wt -B /tmp/b256 -G Ninja \
#     -DCMAKE_BUILD_TYPE=Release -DFLASHATTN_CUDA=ON -DFLASHATTN_CUDA_ARCHS=90 -DFLASHATTN_HEADDIMS=256 \
#     -DFLASHATTN_BUILD_TESTS=OFF -DFLASHATTN_BUILD_TOOLS=OFF -DFLASHATTN_BUILD_EXAMPLES=OFF \
#   && ninja -C /tmp/b256 flashattn && xz -c /tmp/b256/src/libflashattn.so.0.1.0 > .s65/l256.so.xz
#   (and the branch's commit into .s65/l256.commit)
# Issue 25's d256 backward at 80-key blocks (one dO stage, dQ staged over the region, P and the Q
# stage: bwd_kernel_sm90_pds.cuh): the d256 backward tests on the new library, then the d256 rows of
# the backward grid against main's library (.after-s62/f.so.xz, 64-key blocks) interleaved, with
# torch FA2 and cuDNN, and FlashAttention-3 where .fa3/fa3.so is carried. Carry .s65 (l256.so.xz: a
# d256-only build of the change, l256.commit), .after-s62 and, for FA3, .fa3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-570} ))
export FLASHATTN_COMMIT=$(cat .s65/l256.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib .s65/l256.so.xz -k "${TESTS:-256}" --timeout ${TEST_TIMEOUT:-240}
python3 scripts/gpu.py --out $OUT/b bench backward --lib .s65/l256.so.xz --compare main:.after-s62/f.so.xz --timeout 400 \
    -- --hdims 256 ${BENCH_ARGS:---quick} $([ -f .fa3/fa3.so ] && echo --fa3 $PWD/.fa3/fa3.so)
cd $OUT && tar czf d256.tgz t b && rm -rf t b
