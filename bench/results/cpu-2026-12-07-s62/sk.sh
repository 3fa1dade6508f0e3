#!/bin/bash
# The stream-K tail experiment (branch exp-fwd-stream-k 4d33b5a; its diff: stream-k.patch), carrying
# .after-s62: k.so.xz (the branch built here, d64 / d128, sm_90), test_forward_sk.py (the branch's
# tests/gpu/test_forward.py, with test_stream_k_tail) and m.so.xz (main c5fab63, d128 / d256).
# 1. the stream-K tests (forced on at short lengths, and the planner's own at 4k; out, lse against the
#    fp64 reference and against the same call without the tail), 2. a memcheck of the short ones,
# 3. the non-causal forward rows with the tail forced on and off as variant columns, main as --lib
#    (the plain path's cost of the branch: ptxas counts 32 / 24 B of spills against main's 20 / 16).
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-230} )) FLASHATTN_COMMIT=$(cat .after-s62/k.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
cp .after-s62/test_forward_sk.py tests/gpu/test_forward.py
K=.after-s62/k.so.xz
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $K --name sk --timeout 60 -k "stream_k or (dense and 128)" | tail -1
python3 scripts/gpu.py --out $OUT/s pytest tests/gpu/test_forward.py --lib $K --name sk-memcheck --timeout 60 --sanitize memcheck \
  -k "stream_k and not auto" | tail -1
python3 scripts/gpu.py --out $OUT/f bench forward --lib $K --timeout ${BENCH_TIMEOUT:-100} -- --hdims ${HDIMS:-128} --shapes ${SHAPES:-mha} \
  --seqlens ${SEQLENS:-1024,4096,16384} --alternate 3 --variant on:forward_stream_k=on --variant off:forward_stream_k=off \
  --lib main:.after-s62/m.so.xz | tail -10
cd $OUT && tar czf all.tgz t s f && rm -rf t s f
