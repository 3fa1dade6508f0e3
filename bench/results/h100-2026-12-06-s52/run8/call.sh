#!/bin/bash
# Session 52 exp 8. x = branch fwd-q-tma-long (every head dim): the Hopper forward's Q by TMA from
# the producer's thread 32 where the keys are at least 8k (the other producer threads then leave the
# tile loop); below 8k keys main's cp.async path. m = main. Tests with x: test_forward (with the new
# test_q_by_tma_past_8k_keys), memcheck over that test; then the forward grid (every head dim),
# m as ours and x compared, --alternate 3.
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
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x --timeout 150
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x-memcheck --sanitize memcheck --timeout 90 -k "q_by_tma"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 330 -- --alternate 3 --lib qtma:$B/x.so | tail -64
cd $OUT && tar czf all.tgz t f && rm -rf t f
