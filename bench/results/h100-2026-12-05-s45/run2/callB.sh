#!/bin/bash
# Session 45 call B. split = branch bwd-walk-split (the backward's GQA walk split in parts: overrides
# backward_gqa=kv_split (halves; also deterministic: two adds onto zero) and kv_split4 (quarters)). (1) its
# GQA tests (the schemes and the deterministic ordered-dQ cases, bitwise over runs), memcheck over the
# split cases; (2) the GQA backward grid at 1k-4k (32/8, 64/8 at d128, 32/4 at d256), the split variants
# against the planner's choice in one process, two rounds; (3) roles swapped at d128 1k-2k: kv_split as
# the library's choice, the planner's as the variant.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-400} ))
B=.after-s45
export FLASHATTN_COMMIT=$(cat $B/split.commit)
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/split.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/split.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
G="python3 scripts/gpu.py --out $OUT/t"
$G pytest tests/gpu/test_backward.py --lib $B/split.so --name bwd-split-gqa --timeout 80 -k "gqa"
$G pytest tests/gpu/test_backward.py --lib $B/split.so --name bwd-split-memcheck --sanitize memcheck --timeout 90 -k "kv_split"
cat $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/split.so --timeout 150 -- --hdims 128,256 --shapes gqa \
   --seqlens 1024,2048,4096 --rounds 2 --variant split:backward_gqa=kv_split --variant split4:backward_gqa=kv_split4 \
   --variant walk:backward_gqa=kv_major --det-variant dsplit:backward_gqa=kv_split | tail -2
FLASHATTN_OVERRIDES=backward_gqa=kv_split python3 scripts/gpu.py --out $OUT/s bench backward --lib $B/split.so --timeout 60 -- \
   --hdims 128 --shapes gqa --seqlens 1024,2048 --rounds 3 --variant auto:backward_gqa=auto | tail -2
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && tar czf grid.tgz b s && rm -rf t b s
