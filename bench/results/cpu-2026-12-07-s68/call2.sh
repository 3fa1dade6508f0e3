#!/bin/bash
# Carry .s68/main.so.xz and .s68/main.commit. On an H200: main's backward grid, the top-level record
# (rec.sh bwd). On an H100 instead: issue 25's d256 deterministic rows, where deterministic / default
# is lowest (session 57: GQA 32/4 causal 1k 0.78, MHA 8/8 causal 1k 0.84): Nsight Compute's source
# counters over main's ordered-dQ kernel and its default kernel at d256 causal 1k (GQA 32/4) and 4k
# (MHA), for bench/ncu_stalls.py; then the d256 backward grid (--quick, deterministic column) against
# cuDNN and torch FA2. A smaller DEADLINE cuts the later steps.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
L=.s68/main.so.xz
export FLASHATTN_COMMIT=$(cat .s68/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
if grep -q H200 $OUT/gpu.txt; then
  python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 560 | tail -1
  exit 0
fi
python3 scripts/gpu.py --out $OUT/p profile backward --lib $L --shapes "${SHAPES:-d256c1kg32x4 d256c4k}" \
    --impls "ours_sm90 ours_det" --export main --timeout 260 | tail -3
rm -f $OUT/p/*.ncu-rep
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 200 -- --hdims 256 --quick | tail -14
cd $OUT && tar czf all.tgz p b && rm -rf p b
