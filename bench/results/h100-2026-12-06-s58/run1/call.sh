#!/bin/bash
# Session 58 first call (about 8 minutes, DEADLINE=540). x = branch fwd-first-s-ss (d128-only build): the
# Hopper forward issues a tile's first S from Q in shared memory (an SS product) and loads Q's registers
# (ldmatrix) under it, instead of before the first K wait and the turn. m = main (every head dim).
# Tests with x (d128 cases), memcheck on a subset, then the d128 forward grid at 1k / 2k / 4k / 16k with
# m as ours and x as --lib, --alternate 3.
S=.after-s57
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-540} ))
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','x.so']:
    p=pathlib.Path('$S/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$S/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $S/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $S/x.so --name fwd-x --timeout 120 -k "(128 or gqa or varlen or misaligned or packed or window or malformed or diagonal or end_aligned) and not 192 and not 256 and not d64" | tail -1
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $S/x.so --name fwd-x-memcheck --sanitize memcheck --timeout 80 -k "(dense and bf16 and causal and not 256 and not 64-) or (varlen and 128) or malformed" | tail -1
python3 scripts/gpu.py --out $OUT/f bench forward --lib $S/m.so --timeout 300 -- --hdims 128 --seqlens 1024,2048,4096,16384 --alternate 3 --lib x:$S/x.so | tail -28
