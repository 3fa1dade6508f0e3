#!/bin/bash
# Session 52 exp 10. The features bench's 192 / 128 rows (causal and not, 4k / 8k / 16k: Q by TMA from
# 8k keys in x, one Q buffer, O staged in it) with m = main as ours and x = the kept change
# (1f33b4b, every head dim) compared, three rounds.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-200} ))
B=.after-s52
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','x.so']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
python3 scripts/gpu.py --out $OUT/x bench features --lib $B/m.so --timeout 150 -- --kinds value_dim --rounds 3 --lib x:$B/x.so | tail -14
cd $OUT && tar czf all.tgz x && rm -rf x
