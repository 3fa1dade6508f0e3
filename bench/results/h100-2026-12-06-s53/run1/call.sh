#!/bin/bash
# Session 53 exp 1. x = branch fwd-tile-records (d128 only): in the Hopper forward's looping form the
# producer's thread 0 decodes each tile once (sequence bounds, mask block ranges, every consumer's
# rows and narrow flag) and publishes it in the two-slot tile ring a tile ahead, for every schedule
# (claimed or static); the consumers read it instead of decoding at their tile edge. Register split
# 56 / 224 (was 40 / 232) for the two-consumer kernels. m = main (every head dim).
# Tests with x (its other head dims are not built: those cases fail as such); memcheck over the varlen,
# causal dense and end-aligned d128 cases; then the d128 forward grid, m as ours and x compared, --alternate 3.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','x.so']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x --timeout 150 -k "128 or gqa or varlen or misaligned or packed or window or malformed or diagonal or end_aligned or q_by_tma"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $B/x.so --name sink-x --timeout 60 -k "sink_features or sink_varlen or sink_rows"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x-memcheck --sanitize memcheck --timeout 100 -k "(dense and bf16 and causal and not 256 and not 64-) or (varlen and 128) or malformed"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 330 -- --hdims 128 --alternate 3 --lib rec:$B/x.so | tail -36
cd $OUT && tar czf all.tgz t f && rm -rf t f
