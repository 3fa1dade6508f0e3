#!/bin/bash
# FlashAttention-3 beside ours, torch FA2 and cuDNN in one process (the records' timing, no
# --alternate), carrying .after-s62 (f.so.xz: main's library, f.commit) and .fa3 (fa3.so: built here by
#   bash bench/fa3/build.sh /tmp/fa3/hopper .fa3/fa3.so
# from FlashAttention-3 0251105a, hopper/, with the pinned CUTLASS 4.2.0).
#   fa3.sh fwd   the whole forward grid    fa3.sh bwd   the whole backward grid (with both deterministic columns)
L=.after-s62/f.so.xz
export FLASHATTN_COMMIT=$(cat .after-s62/f.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
case "$1" in
fwd) python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --timeout 560 -- --fa3 $PWD/.fa3/fa3.so ${@:2}
     cd $OUT && tar czf f.tgz f && rm -rf f ;;
bwd) python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --timeout 570 -- --fa3 $PWD/.fa3/fa3.so ${@:2}
     cd $OUT && tar czf b.tgz b && rm -rf b ;;
esac
