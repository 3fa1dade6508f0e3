#!/bin/bash
# Session 53 exp 9. kf = branch fwd-k-first (d128 only): the Hopper forward's producer issues a tile's
# first K block before Q's copies where Q has two buffers (d65-128; with one buffer it already did), from
# the stamps of exp 8 (K landed ~350-500 cycles after the consumers had Q at 1k). m = main (every head dim).
# Tests with kf (d128 cases); memcheck; the stamps' timeline with the same change (tl3); then the d128
# forward grid, m as ours and kf compared, --alternate 3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','kf.so','tl3.so']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/kf.so --name fwd-kf --timeout 120 -k "(128 or gqa or varlen or misaligned or packed or window or malformed or diagonal or end_aligned) and not 192 and not 256 and not d64"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/kf.so --name fwd-kf-memcheck --sanitize memcheck --timeout 80 -k "(dense and bf16 and causal and not 256 and not 64-) or (varlen and 128) or malformed"
tail -1 $OUT/t/summary.txt
TL_NAME=tl3 FLASHATTN_LIBRARY=$PWD/$B/tl3.so PYTHONPATH=$PWD/python timeout 100 python3 $B/timeline.py > $OUT/timeline-tl3.txt 2>&1
grep -E "==|producer|relative|consumer 0" $OUT/timeline-tl3.txt
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 330 -- --hdims 128 --alternate 3 --lib kf:$B/kf.so | tail -34
cd $OUT && tar czf all.tgz t f && rm -rf t f
