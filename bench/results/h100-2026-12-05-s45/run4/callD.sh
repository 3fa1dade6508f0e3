#!/bin/bash
# Session 45 call D. pairs = branch bwd-walk-split's planner rule (causal GQA with groups of 8 or more: a CTA per
# pair of query heads up to 4096 keys, default mode) against g8 (main: the scratch there). (1) pairs: test_backward
# whole, memcheck over its GQA cases; (2) the GQA backward grid 1k-8k, pairs as ours with g8 compared, two rounds;
# (3) the roles swapped at 1k-4k.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-330} ))
B=.after-s45
export FLASHATTN_COMMIT=$(cat $B/pairs.commit)
python3 -c "
import lzma,pathlib
for n in ['pairs','g8']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
G="python3 scripts/gpu.py --out $OUT/t"
$G pytest tests/gpu/test_backward.py --lib $B/pairs.so --name bwd-pairs --timeout 60
$G pytest tests/gpu/test_backward.py --lib $B/pairs.so --name bwd-pairs-memcheck --sanitize memcheck --timeout 70 -k "gqa"
cat $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/pairs.so --compare g8:$B/g8.so --timeout 110 -- \
   --hdims 128,256 --shapes gqa --seqlens 1024,2048,4096,8192 --rounds 2 | tail -2
export FLASHATTN_COMMIT=$(cat $B/g8.commit)
python3 scripts/gpu.py --out $OUT/s bench backward --lib $B/g8.so --compare pairs:$B/pairs.so --timeout 70 -- \
   --hdims 128,256 --shapes gqa --seqlens 1024,2048,4096 --rounds 2 | tail -2
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && tar czf grid.tgz b s && rm -rf t b s
