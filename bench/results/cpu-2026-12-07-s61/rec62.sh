#!/bin/bash
# The top-level backward records on an H200 with main's planner as merged (the GQA walk to 8192 keys),
# in two calls on one warm machine, carrying .after-s61 (cpu-2026-12-07-s60/prep.sh: CUTLASS headers):
#   rec62.sh build   (~250 s) builds main for d64 / d128 / d256 on sm_90 and runs test_backward's GQA cases
#   rec62.sh grid    (~570 s) the whole backward grid (deterministic column, torch FA2 and cuDNN in the process)
# Pass the measured commit: FLASHATTN_COMMIT=$(git rev-parse HEAD) here, written into the command (the
# device's copy of .git can be stale).
D=.after-s61
L=build-rec/src/libflashattn.so
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || { echo "not an H200: stop (run call6.sh for the A/B instead)"; exit 0; }
case "$1" in
build)
    export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-280} ))
    [ -d third_party/cutlass ] || tar xzf $D/cutlass.tgz
    python3 scripts/gpu.py --out $OUT/k build --name rec --build-dir build-rec --headdims 64,128,256 --archs 90 --timeout 240
    [ -f $L ] || { echo "the build failed"; exit 1; }
    python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $L --name bwd --timeout 30 -k gqa | tail -1 ;;
grid)
    export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
    [ -f $L ] || { echo "no build-rec: run 'rec62.sh build' first on this machine"; exit 1; }
    python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 570 | tail -1
    cd $OUT && tar czf all.tgz b && rm -rf b ;;
*) echo "usage: rec62.sh build|grid"; exit 2 ;;
esac
