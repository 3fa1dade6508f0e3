#!/bin/bash
# Carry .s66/main.so.xz, .s66/main.commit, .s66/m4.so.xz, .s66/p4.so.xz, .s67/wm4.so.xz,
# .s67/wm4e.so.xz and .s67/wm4n.so.xz (as paths: the whole .s66 and .s67 with the tree pass the 64
# MiB carry limit). Issue 24's forward experiment in one process, interleaved, torch FA2 and cuDNN
# beside it: main at d8a209b (.s66/main.so.xz, every head dim) against d64 + d128 builds of branch
# fwd-softmax-ilp (its constants in fwd_kernel_sm90.cuh, marked EXPERIMENT):
#   m4   (.s66, eac0fc6)  each row's max in 4 chains (kMaxChains 4)
#   p4   (.s66, eac0fc6)  m4, and every 4th exponential of an unmasked block by poly_exp2 (kExpPolyEvery 4)
#   wm4  (.s67, 207074b)  m4 (chains from their first score), and the next step's K and V stages probed
#                         under the softmax (kProbeFull), the ring's stage and use unsigned
#   wm4e (.s67, 4186c9e)  wm4, and the d128 plain kernel waits for P V after the rows' max, O
#                         rescaled there, the conversions of P among the exponentials (kEarlyPvWait);
#                         its d64 kernels are wm4's with every row's max ahead of the exponentials
#   wm4n (.s67, 3b214e4)  wm4 (with 4186c9e's split, kEarlyPvWait off), and the step loop's P V always
#                         whole (kHalfPvInSteps off): no branch ahead of it, a runtime scale-d
# (p4's polynomial on top of the probes, wp4, is left out: p4 against m4 answers for it.) Then the
# d64 / d128 forward tests on wm4, wm4e and wm4n. A smaller DEADLINE cuts the later steps.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-560} ))
L=.s66/main.so.xz
export FLASHATTN_COMMIT=$(cat .s66/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/b bench forward --lib $L --timeout 380 \
    --compare m4:.s66/m4.so.xz --compare p4:.s66/p4.so.xz --compare wm4:.s67/wm4.so.xz \
    --compare wm4e:.s67/wm4e.so.xz --compare wm4n:.s67/wm4n.so.xz \
    -- --hdims ${HDIMS:-64,128} ${BENCH_ARGS:---quick} | tail -40
for v in wm4 wm4e wm4n; do
  python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib .s67/$v.so.xz --name fwd-$v \
      -k "(dense or running_max or d64_ or diagonal or gqa or varlen or softcap or q_by_tma) and not 256 and not 192" \
      --timeout 50 | tail -1
done
