#!/bin/bash
# On an H200: the records' build (rec62.sh build; its grid in the next call). On an H100 (about 110 s),
# carrying .after-s62 (c.so.xz: main 86f29c2, the forward sections capped at 16 pairs where each tile is
# its own CTA, d256 only, built here) and .after-s61 (n.so.xz: main d79feb9, d128 / d256, no cap): the
# d256 causal forward tests on c, then the d256 forward rows 1k-16k with n as --lib, --alternate 3.
S=bench/results/cpu-2026-12-07-s61
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    bash $S/rec62.sh build; exit
fi
unset FLASHATTN_COMMIT
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-200} )) FLASHATTN_COMMIT=$(cat .after-s62/c.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib .after-s62/c.so.xz --name fwd-c --timeout 50 -k "256 and causal" | tail -1
python3 scripts/gpu.py --out $OUT/f bench forward --lib .after-s62/c.so.xz --timeout 140 -- --hdims 256 --seqlens 1024,2048,4096,8192,16384 \
  --alternate 3 --lib old:.after-s61/n.so.xz | tail -24
cd $OUT && tar czf f.tgz f t && rm -rf f t
