#!/bin/bash
# Session 50 call 1. x = main + W (the causal default-mode Hopper backward walks each key block's
# query blocks from the last down; branch bwd-causal-walk-down) + R (the d256 ordered dQ releases
# its stage once the reductions have read it; branch det-stage-release-on-read); m = main.
# W changes only default-mode causal Hopper calls, R only deterministic d256: disjoint columns.
# Tests with x: main's C++ CUDA cases (static binary), test_backward's causal and deterministic
# cases, memcheck over a subset; then the backward grid, main as ours and x compared, two rounds,
# and the 192 / 128 rows of the features bench with x compared, three rounds.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-575} ))
B=.after-s50
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','x.so','backend_tests_x']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
chmod +x $B/backend_tests_x
export FLASHATTN_COMMIT=$(cat $B/m.commit)
mkdir -p $OUT/t
( timeout 120 $B/backend_tests_x --gtest_filter='Cuda*' > $OUT/t/ctest-x.log 2>&1; echo "ctest x rc=$?" ) ; tail -3 $OUT/t/ctest-x.log
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/x.so --name bwd-x --timeout 150 -k "determin or causal"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $B/x.so --name vds-x --timeout 60 -k "backward"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/x.so --name bwd-x --sanitize memcheck --timeout 70 -k "(causal and not determin and (varlen or gqa)) or (ordered_dq and 256)"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/ab bench backward --lib $B/m.so --compare x:$B/x.so --timeout 230 -- --rounds 2 | tail -64
python3 scripts/gpu.py --out $OUT/f bench features --lib $B/m.so --timeout 70 -- --kinds value_dim --rounds 3 --lib x:$B/x.so | tail -14
cd $OUT && tar czf all.tgz t ab f && rm -rf t ab f
