#!/bin/bash
# Session 53 exp 2. x1 = branch fwd-tile-records with the next tile published once the tile's first
# loads are issued (exp 1 published it after all of them; below 8k keys the other producer threads'
# Q copy waits for it); x2 = main with only the register split 56 / 224 (was 40 / 232) for the
# two-consumer kernels. Both d128 only; m = main (every head dim).
# Tests with x1 (d128 cases); memcheck; then the d128 forward grid, m as ours and x1, x2 compared, --alternate 3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','x1.so','x2.so']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x1.so --name fwd-x1 --timeout 120 -k "(128 or gqa or varlen or misaligned or packed or window or malformed or diagonal or end_aligned) and not 192 and not 256 and not d64"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x1.so --name fwd-x1-memcheck --sanitize memcheck --timeout 80 -k "(dense and bf16 and causal and not 256 and not 64-) or (varlen and 128) or malformed"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 360 -- --hdims 128 --alternate 3 --lib rec:$B/x1.so --lib split:$B/x2.so | tail -36
cd $OUT && tar czf all.tgz t f && rm -rf t f
