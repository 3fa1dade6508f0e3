#!/bin/bash
# The top-level records with main's planner as of session 62 (the GQA walk to 8192 keys, the forward's
# 16-pair sections where each tile is its own CTA, the ordered dQ's one-pair causal sections), in two
# calls on one warm machine, carrying .after-s62 (f.so.xz: main's library for d64 / d128 / d256, sm_90,
# built here; f.commit its commit):
#   rec63.sh fwd   (~250 s on an H200) the GQA / deterministic backward and d256 causal forward tests,
#                  then the whole forward grid (torch FA2 and cuDNN in the process)
#   rec63.sh bwd   (~300-560 s) the whole backward grid with the deterministic column
# On an H100 the same runs give that card's grids (files named for the card), not the H200 records.
D=.after-s62
L=$D/f.so.xz
export FLASHATTN_COMMIT=$(cat $D/f.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
case "$1" in
fwd)
    export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
    python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $L --name bwd --timeout 60 -k "gqa or deterministic" | tail -1
    python3 scripts/gpu.py --out $OUT/u pytest tests/gpu/test_forward.py --lib $L --name fwd --timeout 30 -k "256 and causal" | tail -1
    python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --timeout 420 | tail -1
    cd $OUT && tar czf all.tgz t u f && rm -rf t u f ;;
bwd)
    export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
    python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 570 | tail -1
    cd $OUT && tar czf all.tgz b && rm -rf b ;;
*) echo "usage: rec63.sh fwd|bwd"; exit 2 ;;
esac
