#!/bin/bash
# call3.sh cut to fit a short budget (no memcheck; the GQA backward rows at 1k / 2k only, where the
# prediction lies). y = branch bwd-dkv-sums-default (d128 / d256), m = main (.after-s57); scripts/gpu.py
# unpacks the .xz libraries.
S=.after-s57; X=.after-s58
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-220} )) FLASHATTN_COMMIT=$(cat $S/m.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $X/y.so.xz --name bwd-y --timeout 70 -k "(deterministic or gqa) and not 64" | tail -1
grep -E "^FAILED|^E  " $OUT/t/bwd-y.log | head -8
python3 scripts/gpu.py --out $OUT/b bench backward --lib $S/m.so.xz --timeout 120 -- --hdims 128,256 --shapes gqa --seqlens 1024,2048 --alternate 3 --lib y:$X/y.so.xz | tail -16
