#!/bin/bash
# Session 52 exp 7. x = branch fwd-q-warp (d128 only): the Hopper forward's Q by cp.async from the
# producer's second warp alone (main: all 128 producer threads), so that with K/V by TMA from thread
# 0 the producer's other threads leave the tile loop instead of waiting on every tile's Q buffer;
# m = main. Tests with x: test_forward's d128, GQA, varlen, window, misaligned and packed cases;
# memcheck over the d128 causal dense cases; then the d128 forward grid, m as ours and x compared,
# --alternate 3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s52
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','x.so']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x --timeout 150 -k "128 or gqa or varlen or misaligned or packed or window"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x-memcheck --sanitize memcheck --timeout 90 -k "dense and bf16 and causal and not 256 and not 64-"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 330 -- --hdims 128 --alternate 3 --lib qwarp:$B/x.so | tail -36
cd $OUT && tar czf all.tgz t f && rm -rf t f
