#!/bin/bash
# Why FlashAttention-3's d128 forward and backward run ~10% above ours with the same instructions a
# block (docs/perf-log.md, session 63), in one call (~6-7 minutes), carrying .after-s62 (main's
# library, f.so.xz / f.commit) and .fa3 (fa3.so, bench/fa3/build.sh):
#   1. bench/gpu_power.py --fa3 (3 s a kernel): clock, power and tensor share per cycle of ours,
#      cuDNN and FA3 at d128 (16k x 1 at 64/8 and 16/16, 1k x 16 at 16/16; causal and not)
#   2. Nsight Compute over ours and FA3, d128 4k causal and not (prof.sh's sections)
export FLASHATTN_COMMIT=$(cat .after-s62/f.commit) FLASHATTN_PROFILE_FA3=$PWD/.fa3/fa3.so
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
python3 scripts/gpu.py --out $OUT/w bench power --lib .after-s62/f.so.xz --timeout 330 -- --fa3 $PWD/.fa3/fa3.so --seconds 3
python3 scripts/gpu.py --out $OUT/p profile forward --lib .after-s62/f.so.xz --shapes "d128c4k d128n4k" \
    --impls "ours_sm90 fa3" --ncu-args "--section MemoryWorkloadAnalysis" --timeout 200
cd $OUT && tar czf why.tgz w p && rm -rf w p
