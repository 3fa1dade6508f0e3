#!/bin/bash
# Issue 24, the forward softmax's critical path (carry .s66 and .after-s62): d128-only libraries of
# branch fwd-softmax-ilp built on the development machine, each a setting of the experiment's two
# constants in fwd_kernel_sm90.cuh (kMaxChains: the row max in that many independent chains;
# kExpPolyEvery: every that-many-th exponential of an unmasked block by poly_exp2 on the FMA pipes):
#   m4 = 4 chains, no polynomial; p4 = 4 chains, 1 in 4 by polynomial; p2 = 4 chains, 1 in 2.
# The d128 forward rows (MHA 16/16, GQA 32/8 and 64/8; 1k / 4k / 16k; causal and not) against
# main's library (.after-s62/f.so.xz, 419c07d: the forward unchanged since) interleaved, then the
# d128 forward tests on p2 and p4.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-570} ))
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/b bench forward --lib .after-s62/f.so.xz --timeout 400 \
    --compare m4:.s66/m4.so.xz --compare p4:.s66/p4.so.xz --compare p2:.s66/p2.so.xz \
    -- --hdims 128 ${BENCH_ARGS:---quick} | tail -25
for v in p2 p4; do
  python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib .s66/$v.so.xz --name fwd-$v -k "${TESTS:-128}" --timeout 90 | tail -2
done
