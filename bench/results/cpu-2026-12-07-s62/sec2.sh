#!/bin/bash
# The forward's masked tile-order section on the GQA shapes, finer (carry .after-s61 with s.so.xz: branch
# exp-fwd-sections d11dde0). Run 1 found d256 32/4 causal 1k/2k faster with smaller sections (pair +5%,
# 4 MB +3%) while MHA lost with them. Sections of 1/2/4/8 MB and one pair against the planner's 16 MB
# (which divides K/V bytes by the group size), 1k-8k, --alternate 3. On an H200, rec62.sh build first.
D=.after-s61
S=bench/results/cpu-2026-12-07-s61
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
    ( OUT=$OUT/rec; mkdir -p $OUT; DEADLINE=270 bash $S/rec62.sh build )
fi
unset FLASHATTN_COMMIT
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} )) FLASHATTN_COMMIT=$(cat $D/s.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/f bench forward --lib $D/s.so.xz --timeout 290 -- --shapes gqa --seqlens 1024,2048,4096,8192 \
  --alternate 3 --variant s1:forward_section_mb=1 --variant s2:forward_section_mb=2 --variant s4:forward_section_mb=4 \
  --variant s8:forward_section_mb=8 --variant pair:forward_section_mb=0.0001 | tail -28
cd $OUT && tar czf f.tgz f && rm -rf f
