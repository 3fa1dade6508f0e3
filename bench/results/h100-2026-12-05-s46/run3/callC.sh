#!/bin/bash
# Session 46 call C: p = branch bwd-det-pairs4 (deterministic mode takes the pairs at even groups of 4 from
# 1025 to 4096 keys; Sm90BwdWork's unit count once per CTA) against m = main 8e494cf: test_backward and
# test_value_dim_sink with p, memcheck over the deterministic GQA cases, then the GQA backward at d128 1k-8k,
# p against m in both role orders (the deterministic column moves at 32/8 causal 2k / 4k; the rest is the same
# plan); and t = p with the causal backward's key-major tail at least two pairs where a 40 MB section holds
# one (192 / 128 and d256 at 16k), at 192 / 128 16k against p in both role orders, three rounds.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-500} ))
B=.after-s46
export FLASHATTN_COMMIT=p
python3 -c "
import lzma,pathlib
for n in ['m','p','t']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
G="python3 scripts/gpu.py --out $OUT/t"
$G pytest tests/gpu/test_backward.py --lib $B/p.so --name bwd --timeout 70
$G pytest tests/gpu/test_value_dim_sink.py --lib $B/p.so --name vds --timeout 40
$G pytest tests/gpu/test_backward.py --lib $B/p.so --name bwd-memcheck --sanitize memcheck --timeout 70 -k "pairs_at_groups or varlen_gqa_pairs or (deterministic and gqa)"
cat $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/f bench backward --lib $B/p.so --compare main:$B/m.so --timeout 60 -- \
   --hdims 128 --shapes gqa --seqlens 1024,2048,4096,8192 --rounds 1 | tail -2
python3 scripts/gpu.py --out $OUT/g bench backward --lib $B/m.so --compare p:$B/p.so --timeout 60 -- \
   --hdims 128 --shapes gqa --seqlens 1024,2048,4096,8192 --rounds 1 | tail -2
python3 scripts/gpu.py --out $OUT/x bench features --lib $B/t.so --compare p:$B/p.so --timeout 45 -- \
   --kinds value_dim --seqlens 16384 --rounds 3 | tail -2
python3 scripts/gpu.py --out $OUT/y bench features --lib $B/p.so --compare t:$B/t.so --timeout 45 -- \
   --kinds value_dim --seqlens 16384 --rounds 3 | tail -2
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && tar czf grid.tgz f g x y && rm -rf t f g x y
