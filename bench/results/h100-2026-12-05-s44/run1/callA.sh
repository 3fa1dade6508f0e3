#!/bin/bash
# Call A. OO (branch bwd-staged-turn: the d256 ordered dQ releases its stage once the reductions read it,
# counts after their completion) against main (409a03f), and QQ (override backward_tail_pairs: the
# causal backward grid's key-major tail without the 40 MB section cap).
# (1) OO's tests: test_backward's deterministic cases and the d256 ones, test_value_dim_sink's backward,
#     memcheck over the ordered dQ cases (varlen included);
# (2) the d256 backward grid (MHA 8/8 and GQA 32/4, 1k-16k, default + deterministic), oo and main
#     interleaved, two rounds;
# (3) QQ at d128, 1k-4k, MHA and GQA: the planner's tail against 0 / 16 / 33 / 66 pairs (one process);
# (4) QQ at 192 / 128 (features bench, value_dim, 8k and 16k): planner's tail against 16 pairs.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s44
export FLASHATTN_COMMIT=$(cat $B/oo.commit)
python3 -c "
import lzma,pathlib
for n in ['main','oo']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
G="python3 scripts/gpu.py --out $OUT/t"
$G pytest tests/gpu/test_backward.py --lib $B/oo.so --name bwd-oo --timeout 110 -k "deterministic or 256"
$G pytest tests/gpu/test_value_dim_sink.py --lib $B/oo.so --name vds-oo --timeout 60 -k backward
$G pytest tests/gpu/test_backward.py --lib $B/oo.so --name bwd-oo-memcheck --sanitize memcheck --timeout 120 \
   -k "ordered_dq and 256 and not chunks"
cat $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/oo.so --compare main:$B/main.so --timeout 200 -- \
   --hdims 256 --rounds 2 | tail -2
python3 scripts/gpu.py --out $OUT/q bench backward --lib $B/oo.so --timeout 150 -- --hdims 128 --seqlens 1024,2048,4096 \
   --variant t0:backward_tail_pairs=0 --variant t16:backward_tail_pairs=16 --variant t33:backward_tail_pairs=33 \
   --variant t66:backward_tail_pairs=66 | tail -2
for o in auto 16; do
  O=""; [ $o != auto ] && O=backward_tail_pairs=$o
  FLASHATTN_OVERRIDES=$O python3 scripts/gpu.py --out $OUT/f-$o bench features --lib $B/oo.so --timeout 70 -- \
     --kinds value_dim --seqlens 8192,16384 | tail -2
done
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && tar czf grid.tgz b q f-* && rm -rf t b q f-*
