#!/bin/bash
# Session 46 call A: main's library (m = 41089ac) -- the pairs' varlen test and the GQA / deterministic
# backward cases, memcheck over the pairs' cases, then the forward, backward and features grids (two rounds,
# torch FA2 and cuDNN interleaved in the same process), and the GQA backward at 1k-8k with the whole walk and
# the pairs forced in deterministic mode (both as variants, listed in both orders).
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-575} ))
B=.after-s46
export FLASHATTN_COMMIT=$(cat $B/m.commit)
python3 -c "
import lzma,pathlib
for n in ['m']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
G="python3 scripts/gpu.py --out $OUT/t"
$G pytest tests/gpu/test_backward.py --lib $B/m.so --name bwd-gqa --timeout 60 -k "gqa or deterministic"
$G pytest tests/gpu/test_backward.py --lib $B/m.so --name bwd-pairs-memcheck --sanitize memcheck --timeout 60 -k "varlen_gqa_pairs or kv_pairs"
cat $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 135 -- --rounds 2 | tail -2
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/m.so --timeout 135 -- --rounds 2 | tail -2
python3 scripts/gpu.py --out $OUT/x bench features --lib $B/m.so --timeout 60 -- --rounds 2 | tail -2
python3 scripts/gpu.py --out $OUT/g bench backward --lib $B/m.so --timeout 70 -- --hdims 128,256 --shapes gqa \
   --seqlens 1024,2048,4096,8192 --rounds 1 --det-variant walk:backward_gqa=kv_major --det-variant pairs:backward_gqa=kv_pairs | tail -2
python3 scripts/gpu.py --out $OUT/h bench backward --lib $B/m.so --timeout 70 -- --hdims 128,256 --shapes gqa \
   --seqlens 1024,2048,4096,8192 --rounds 1 --det-variant pairs:backward_gqa=kv_pairs --det-variant walk:backward_gqa=kv_major | tail -2
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && tar czf grids.tgz f b x && tar czf gqa.tgz g h && rm -rf t f b x g h
