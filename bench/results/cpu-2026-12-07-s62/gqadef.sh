#!/bin/bash
# On the device (about 80 s), carrying .after-s62 (m.so.xz, main c5fab63): the default mode's GQA
# backward schemes at 1k / 2k (session 61 timed 2k-16k) as variant columns (the group's walk, pairs of
# heads, the scratch), --alternate 3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-150} )) FLASHATTN_COMMIT=$(cat .after-s62/m.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib .after-s62/m.so.xz --timeout 140 -- --hdims 128,256 --shapes gqa --seqlens 1024,2048 \
  --alternate 3 --variant walk:backward_gqa=kv_major --variant pairs:backward_gqa=kv_pairs --variant scratch:backward_gqa=scratch | tail -14
cd $OUT && tar czf b.tgz b && rm -rf b
