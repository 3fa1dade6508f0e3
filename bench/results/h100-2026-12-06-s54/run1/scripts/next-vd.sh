#!/bin/bash
# Prepared in session 53, for the next session. vd = branch bwd-vd-epilogue-stmatrix (every head dim, built
# here at 99f88c2): the Hopper backward's 192 / 128 epilogue stages the transposed dK / dV by
# stmatrix.trans instead of 120 st.shared.b16 a thread (stack 80 -> 40 B). m = main (every head dim).
# Tests with vd: the 192 / 128 backward cases, memcheck over them; then the features bench's value_dim
# rows in both role orders (m as ours, vd as ours), --alternate 3.
# Predicted: 192 / 128 backward +1-1.5% at 4k, +0.5% at 16k (the epilogue's ~2,500 cycles a CTA), the
# forward rows unchanged (the same code).
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','vd.so']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $B/vd.so --name vd --timeout 150 -k "backward_192_128 or value_head_dim"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $B/vd.so --name vd-memcheck --sanitize memcheck --timeout 120 -k "backward_192_128_short or backward_192_128_varlen"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/x bench features --lib $B/m.so --timeout 120 -- --kinds value_dim --alternate 3 --lib vd:$B/vd.so | tail -14
python3 scripts/gpu.py --out $OUT/y bench features --lib $B/vd.so --timeout 120 -- --kinds value_dim --alternate 3 --lib m:$B/m.so | tail -14
cd $OUT && tar czf all.tgz t x y && rm -rf t x y
