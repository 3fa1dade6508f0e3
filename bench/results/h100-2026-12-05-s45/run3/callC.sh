#!/bin/bash
# Session 45 call C. Roles swapped for call B's winner: the walk over quarter groups (backward_gqa=kv_split4:
# two query heads per CTA at groups of 8) as the library's choice, the planner's as the variant, GQA d128
# and d256, causal and not, 1k-8k, three rounds.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
B=.after-s45
export FLASHATTN_COMMIT=$(cat $B/split.commit)
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/split.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/split.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
FLASHATTN_OVERRIDES=backward_gqa=kv_split4 python3 scripts/gpu.py --out $OUT/s bench backward --lib $B/split.so --timeout 250 -- \
   --hdims 128,256 --shapes gqa --seqlens 1024,2048,4096,8192 --rounds 3 --variant auto:backward_gqa=auto | tail -2
cd $OUT && tar czf grid.tgz s && rm -rf s
