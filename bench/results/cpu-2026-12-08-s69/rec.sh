#!/bin/bash
# Carry .s69/main.so.xz and .s69/main.commit (build.sh main). On an H200 only: main's forward grid (`rec.sh fwd`,
# with the features bench) or backward grid with the deterministic column (`rec.sh bwd`), torch FA2
# and cuDNN in the process, by the balanced order: the top-level records.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
L=.s69/main.so.xz
export FLASHATTN_COMMIT=$(cat .s69/main.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || { echo "not an H200: stop"; exit 0; }
case "$1" in
fwd) python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --timeout 330 | tail -1
     python3 scripts/gpu.py --out $OUT/x bench features --lib $L --timeout 220 | tail -1 ;;
bwd) python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 560 | tail -1 ;;
esac
