#!/bin/bash
# On an H200 only: the backward grid (with the deterministic column) of yf (branch bwd-dkv-sums-default,
# every head dim; scripts/gpu.py unpacks it) by the kept method, torch FA2 and cuDNN in the process:
# the top-level records if the branch is merged.
B=.after-s59
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} )) FLASHATTN_COMMIT=$(cat $B/yf.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || { echo "not an H200: stop"; exit 0; }
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/yf.so.xz --timeout 560 | tail -1
cd $OUT && tar czf all.tgz b && rm -rf b
