#!/bin/bash
# On the device (about 120 s), carrying .after-s62 (m.so.xz, main c5fab63): deterministic mode's chunked
# dQ (deterministic_dq=chunks) against the ordered dQ with its one-pair causal sections, as a
# deterministic variant column, on the causal rows at 1k / 2k / 4k (non-causal rows: controls), --alternate 3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-200} )) FLASHATTN_COMMIT=$(cat .after-s62/m.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib .after-s62/m.so.xz --timeout 190 -- --hdims 128,256 --seqlens 1024,2048,4096 \
  --alternate 3 --det-variant chunks:deterministic_dq=chunks | tail -32
cd $OUT && tar czf b.tgz b && rm -rf b
