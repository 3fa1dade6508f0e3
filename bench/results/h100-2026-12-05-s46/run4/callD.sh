#!/bin/bash
# Session 46 call D: t (p with the causal backward's key-major tail at least two pairs) against p again: the
# features' 192 / 128 at 8k / 16k (8k is the same plan in both: a control) and the backward's d256 causal 16k
# rows (MHA 8/8 and GQA 32/4, where t's tail also applies), in both role orders.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-330} ))
B=.after-s46
export FLASHATTN_COMMIT=t
python3 -c "
import lzma,pathlib
for n in ['p','t']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/x bench features --lib $B/t.so --compare p:$B/p.so --timeout 50 -- \
   --kinds value_dim --seqlens 8192,16384 --rounds 3 | tail -2
python3 scripts/gpu.py --out $OUT/y bench features --lib $B/p.so --compare t:$B/t.so --timeout 50 -- \
   --kinds value_dim --seqlens 8192,16384 --rounds 3 | tail -2
python3 scripts/gpu.py --out $OUT/f bench backward --lib $B/t.so --compare p:$B/p.so --timeout 50 -- \
   --hdims 256 --seqlens 16384 --rounds 2 | tail -3
python3 scripts/gpu.py --out $OUT/g bench backward --lib $B/p.so --compare t:$B/t.so --timeout 50 -- \
   --hdims 256 --seqlens 16384 --rounds 2 | tail -3
cd $OUT && tar czf grid.tgz x y f g && rm -rf x y f g
