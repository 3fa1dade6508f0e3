#!/bin/bash
# Where ours and FlashAttention-3's d128 kernels stall, per SASS instruction (session 64): the power
# soak (why.sh, run1) found FA3's tensor share per cycle 11-13% above ours at the same or lower clock
# (forward and backward), so the gap is cycles. Nsight Compute's source counters over ours_sm90 and
# fa3 at d128 (forward: causal 16k and 1k, non-causal 16k; backward: non-causal 16k, causal 1k), the source pages kept as csv for
# bench/ncu_stalls.py; carrying .after-s62 (f.so.xz, f.commit) and .fa3 (fa3.so).
export FLASHATTN_COMMIT=$(cat .after-s62/f.commit) FLASHATTN_PROFILE_FA3=$PWD/.fa3/fa3.so
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
python3 scripts/gpu.py --out $OUT/s profile forward --lib .after-s62/f.so.xz --shapes "${SHAPES:-d128c16k d128c1k d128n16k}" \
    --impls "ours_sm90 fa3" --export fs --timeout 240
rm -f $OUT/s/*.ncu-rep
python3 scripts/gpu.py --out $OUT/s profile backward --lib .after-s62/f.so.xz --shapes "${BSHAPES:-d128n16k d128c1k}" \
    --impls "ours_sm90 fa3" --export bs --timeout 240
rm -f $OUT/s/*.ncu-rep
cd $OUT && tar czf stalls.tgz s && rm -rf s
