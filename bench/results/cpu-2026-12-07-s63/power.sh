#!/bin/bash
# Clocks and power under sustained load (bench/gpu_power.py, 4 s a kernel) for ours, cuDNN and
# FlashAttention-3 at d128 (16k x 1 at 64/8 and 16/16, 1k x 16 at 16/16; causal and not; forward and
# backward), carrying .after-s62 (main's library) and .fa3 (the FA3 shim): does FA3's ~10% over ours
# come from more work a cycle or from a higher clock at the 700 W cap?
export FLASHATTN_COMMIT=$(cat .after-s62/f.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-560} ))
python3 scripts/gpu.py --out $OUT/w bench power --lib .after-s62/f.so.xz --timeout 540 -- --fa3 $PWD/.fa3/fa3.so
cd $OUT && tar czf w.tgz w && rm -rf w
