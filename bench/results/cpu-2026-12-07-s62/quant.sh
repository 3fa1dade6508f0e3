#!/bin/bash
# On the device (about 90 s), carrying .after-s62 (m.so.xz, main c5fab63): does the non-causal forward
# lose its last partial wave? Kernel times (torch.profiler, 10 calls) at 32 heads (4096 tiles of 128
# rows at 16k tokens: 31.03 waves of 132 CTAs, so 32) against 33 heads (4224 tiles: exactly 32 waves),
# d128 (persistent, grid stride) and d256 (one CTA per tile), ours and cuDNN. If the last wave is lost,
# 33 heads take the time of 32 (TFLOP/s +3.1%); if not, 3.1% longer. The shapes run A B B A (the
# clock drifts between implementations run one after another: compare the means).
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-200} )) FLASHATTN_COMMIT=$(cat .after-s62/m.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
S=1024x16x32x32,1024x16x33x33,1024x16x33x33,1024x16x32x32,16384x1x32x32,16384x1x33x33,16384x1x33x33,16384x1x32x32
for d in 128 256; do
  python3 scripts/gpu.py --out $OUT/k$d bench kernels --lib .after-s62/m.so.xz --timeout 90 -- --d $d --shapes $S --causal no --directions forward
  grep "^== " $OUT/k$d/kernels.txt
done
