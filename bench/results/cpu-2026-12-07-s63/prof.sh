#!/bin/bash
# Nsight Compute over one call each of ours (the wgmma kernel) and FlashAttention-3 at d128 4k, causal
# and not (clocks not locked, as scripts/gpu.py profile does; the forward's sections), carrying
# .after-s62 (main's library) and .fa3 (the FA3 shim).
export FLASHATTN_COMMIT=$(cat .after-s62/f.commit) FLASHATTN_PROFILE_FA3=$PWD/.fa3/fa3.so
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-250} ))
python3 scripts/gpu.py --out $OUT/p profile forward --lib .after-s62/f.so.xz --shapes "${SHAPES:-d128c4k d128n4k}" \
    --impls "ours_sm90 fa3" --ncu-args "--section MemoryWorkloadAnalysis" --timeout ${LIMIT:-240}
cd $OUT && tar czf p.tgz p && rm -rf p
