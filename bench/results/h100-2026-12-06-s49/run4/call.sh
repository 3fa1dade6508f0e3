#!/bin/bash
# Session 49 call D: the ordered dQ walked from the last query block down under a causal mask (d.so,
# branch bwd-det-reverse applied on fwd-short-rows' tree: its backward is main's but for that change)
# against main (m.so): test_backward's deterministic cases and the causal d128 / d256 / d64 cases
# with d, memcheck over the ordered dQ's causal and varlen cases, then the deterministic column at d64 /
# d128 / d256 MHA and GQA 1k-4k, main as ours with d compared, two rounds.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-580} ))
B=.after-s49
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m','d']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/d.so --name bwd-d --timeout 150 -k "determin or causal"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/d.so --name bwd-d --sanitize memcheck --timeout 90 -k "ordered_dq and (varlen or causal)"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/ab bench backward --lib $B/m.so --compare det:$B/d.so --timeout 200 -- --hdims 64,128,256 --seqlens 1024,2048,4096 --rounds 2 | tail -40
cd $OUT && tar czf all.tgz t ab && rm -rf t ab
