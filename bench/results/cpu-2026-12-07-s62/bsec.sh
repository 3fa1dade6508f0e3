#!/bin/bash
# On the device (about 200 s), carrying .after-s62 (b.so.xz: branch exp-bwd-sections, main + temporary
# overrides backward_section_mb / backward_dq_section_mb, d256 only, built here): the d256 backward rows
# (MHA 8 / 8, GQA 32 / 4; 1k / 2k / 4k) with the ordered dQ's section (planner: 24 MB of rows) at 6 / 12 /
# 48 / 96 MB as deterministic variant columns, and the default causal grid's tail bound (planner: 40 MB)
# at 10 / 160 MB as default variant columns, --alternate 3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} )) FLASHATTN_COMMIT=$(cat .after-s62/b.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib .after-s62/b.so.xz --timeout 290 -- --hdims 256 --seqlens 1024,2048,4096 \
  --alternate 3 --det-variant q6:backward_dq_section_mb=6 --det-variant q12:backward_dq_section_mb=12 \
  --det-variant q48:backward_dq_section_mb=48 --det-variant q96:backward_dq_section_mb=96 \
  --variant t10:backward_section_mb=10 --variant t160:backward_section_mb=160 | tail -16
cd $OUT && tar czf b.tgz b && rm -rf b
