#!/bin/bash
# Call B (run from branch bwd-dkv-ordered's tree; carry [".after-s42"]): deterministic GQA through the scratch with
# dK / dV added per KV head in query-head order (dkv = 36c2484; main = d39562d, session 40's library).
# (1) test_backward's deterministic / GQA / varlen cases (the new test_deterministic_gqa_dkv_in_head_order among them)
#     and test_value_dim_sink's deterministic backward cases, then memcheck over the deterministic GQA and varlen ones;
# (2) the GQA backward grid at d256 (32/4, 1k-16k) and at d128 where GQA goes through the scratch (32/8, 64/8 at 4k
#     and 16k), default and deterministic columns, dkv and main interleaved, two rounds. Predicted (perf log, NN):
#     deterministic d256 32/4 causal +4-7% at 1k, +2-3% at 2k, +-1% from 4k and at d128; the default columns equal
#     (the default instances' SASS is main's).
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
B=.after-s42
export FLASHATTN_COMMIT=$(cat $B/dkv.commit)
python3 -c "
import lzma,pathlib
for n in ['main','dkv']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
G="python3 scripts/gpu.py --out $OUT/t"
$G pytest tests/gpu/test_backward.py --lib $B/dkv.so --name bwd-dkv --timeout 120 -k "deterministic or gqa or varlen"
$G pytest tests/gpu/test_value_dim_sink.py --lib $B/dkv.so --name vds-dkv --timeout 60 -k "backward and (deterministic or gqa)"
$G pytest tests/gpu/test_backward.py --lib $B/dkv.so --name bwd-dkv-memcheck --sanitize memcheck --timeout 150 \
   -k "dkv_in_head_order or (ordered_dq_gqa and scratch) or ordered_dq_varlen"
cat $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/dkv.so --compare main:$B/main.so -- --shapes gqa --hdims 256 --rounds 2 | tail -2
python3 scripts/gpu.py --out $OUT/b128 bench backward --lib $B/dkv.so --compare main:$B/main.so -- --shapes gqa --hdims 128 --seqlens 4096,16384 --rounds 2 | tail -2
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && tar czf grid.tgz b b128 && rm -rf t b b128
