#!/bin/bash
# On the device (about 300 s), carrying .after-s61 (prep.sh of cpu-2026-12-07-s60: the CUTLASS headers):
# main's library for d128 / d256 on sm_90 (reused where the machine kept build-m), then the GQA backward
# rows at 2k / 4k / 8k with the GQA schemes forced as variant columns: pairs (a CTA per two query heads,
# backward_gqa=kv_pairs) and the whole group's walk (kv_major), against the planner's choice (the scratch
# from 4k without a mask, the pairs / scratch under it).
D=.after-s61
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-330} )) FLASHATTN_COMMIT=$(cat $D/m.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
[ -d third_party/cutlass ] || tar xzf $D/cutlass.tgz
M=build-m/src/libflashattn.so
[ -f $M ] || python3 scripts/gpu.py --out $OUT/k build --name m --build-dir build-m --headdims 128,256 --archs 90 --timeout 240
[ -f $M ] || { echo "the build failed"; exit 1; }
python3 scripts/gpu.py --out $OUT/b bench backward --lib $M --timeout 200 -- --hdims 128,256 --shapes gqa \
  --seqlens 2048,4096,8192 --alternate 3 --variant pairs:backward_gqa=kv_pairs --variant walk:backward_gqa=kv_major | tail -22
