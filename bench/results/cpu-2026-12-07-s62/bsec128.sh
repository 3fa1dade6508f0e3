#!/bin/bash
# On the device (about 220 s), carrying .after-s62 (b128.so.xz: branch exp-bwd-sections 7161095, d128 only,
# built here): run4's ordered-dQ section variants on the d128 rows (MHA 16 / 16, GQA 32 / 8 and 64 / 8;
# 1k-8k): one pair a section (0.01 MB) and 3 / 6 / 12 MB against the planner's 24 MB, --alternate 3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-440} )) FLASHATTN_COMMIT=$(cat .after-s62/b.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib .after-s62/b128.so.xz --timeout 270 -- --hdims 128 --seqlens 1024,2048,4096,8192 \
  --alternate 3 --det-variant pair:backward_dq_section_mb=0.01 --det-variant q3:backward_dq_section_mb=3 \
  --det-variant q6:backward_dq_section_mb=6 --det-variant q12:backward_dq_section_mb=12 | tail -26
( cd $OUT && tar czf b.tgz b && rm -rf b )
# d256 at 1k / 2k (b.so.xz) with one pair a section and 3 MB, which run4 did not time.
python3 scripts/gpu.py --out $OUT/c bench backward --lib .after-s62/b.so.xz --timeout 150 -- --hdims 256 --seqlens 1024,2048 \
  --alternate 3 --det-variant pair:backward_dq_section_mb=0.01 --det-variant q3:backward_dq_section_mb=3 | tail -10
cd $OUT && tar czf c.tgz c && rm -rf c
