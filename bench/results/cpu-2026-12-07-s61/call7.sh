#!/bin/bash
# On the device (about 70 s), carrying .after-s61 with n.so.xz (main 1cffd0a's library built here,
# d128 / d256, sm_90): n's GQA backward tests, then the GQA backward rows at 4k with main's former
# choice there forced as a variant column (backward_gqa=scratch), --alternate 3.
D=.after-s61
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-90} )) FLASHATTN_COMMIT=${FLASHATTN_COMMIT:-$(cat $D/n.commit)}
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $D/n.so.xz --name bwd-n --timeout 30 -k "gqa and not 64" | tail -1
python3 scripts/gpu.py --out $OUT/b bench backward --lib $D/n.so.xz --timeout 60 -- --hdims 128,256 --shapes gqa --seqlens 4096 --alternate 3 --variant scratch:backward_gqa=scratch | tail -8
