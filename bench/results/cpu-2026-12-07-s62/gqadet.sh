#!/bin/bash
# On the device (about 150 s), carrying .after-s62 (m.so.xz, main c5fab63): the deterministic GQA
# backward's schemes re-timed under the ordered dQ's one-pair causal sections, as deterministic variant
# columns (the group's walk, pairs of heads, the scratch) on the GQA rows at 1k / 2k / 4k, --alternate 3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-200} )) FLASHATTN_COMMIT=$(cat .after-s62/m.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib .after-s62/m.so.xz --timeout 190 -- --hdims 128,256 --shapes gqa --seqlens 1024,2048,4096 \
  --alternate 3 --det-variant walk:backward_gqa=kv_major --det-variant pairs:backward_gqa=kv_pairs --det-variant scratch:backward_gqa=scratch | tail -20
cd $OUT && tar czf b.tgz b && rm -rf b
