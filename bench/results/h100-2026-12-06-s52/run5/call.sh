#!/bin/bash
# Session 52 exp 5. x = branch fwd-q-tma (d128 only): the Hopper forward's Q by TMA from the
# producer's thread 0 (one box per 64-column block, kBlockM rows; zeros outside the tensor) where q
# is dense, instead of cp.async from all 128 producer threads; m = main (every head dim).
# Tests with x: test_forward (its other head dims are not built: they fail as such); memcheck over the d128 causal dense cases (end-aligned
# tiles start before row 0); then the d128 forward grid, m as ours and x compared, --alternate 3.
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
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x-memcheck --sanitize memcheck --timeout 90 -k "dense and 128 and causal and bf16"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 330 -- --hdims 128 --alternate 3 --lib qtma:$B/x.so | tail -36
cd $OUT && tar czf all.tgz t f && rm -rf t f
