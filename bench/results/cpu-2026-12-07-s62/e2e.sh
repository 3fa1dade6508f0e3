#!/bin/bash
# On the device (about 400 s), carrying .after-s62 (m.so.xz: main c5fab63, d128 / d256, built here:
# the forward's 16-pair cap and the ordered dQ's one-pair sections under a right window edge) and
# .after-s61 (n.so.xz: main d79feb9, before both): m's deterministic backward tests, a memcheck of the
# ordered dQ's causal cases, then the backward rows at 1k / 2k / 4k with n as --lib old, --alternate 3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-560} )) FLASHATTN_COMMIT=$(cat .after-s62/m.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
M=.after-s62/m.so.xz
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $M --name det --timeout 120 -k "deterministic and not 64" | tail -1
python3 scripts/gpu.py --out $OUT/s pytest tests/gpu/test_backward.py --lib $M --name det-memcheck --timeout 150 --sanitize memcheck \
  -k "ordered_dq and (causal_ragged or gqa_causal or window) and not 64 and not chunks" | tail -1
python3 scripts/gpu.py --out $OUT/b bench backward --lib $M --timeout 250 -- --hdims 128,256 --seqlens 1024,2048,4096 \
  --alternate 3 --lib old:.after-s61/n.so.xz | tail -32
cd $OUT && tar czf all.tgz t s b && rm -rf t s b
