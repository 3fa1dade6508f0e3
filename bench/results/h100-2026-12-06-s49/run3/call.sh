#!/bin/bash
# Session 49 call E (second try: s.so's d192 unit rebuilt; the sink's kernel times left out, run on the H100 in
# the first try). E: the two-consumer 128-row d64 tile (s.so, branch fwd-short-rows: every d <= 64
# problem up to 2048 keys) against main's 192-row tile (m.so): test_forward's d64 short-tile, lone-tile
# and end-aligned cases with s, memcheck over the short-tile cases, the d64 forward grid at 1k-4k (4k: the
# control, the same tile in both) with main as ours and s compared, three rounds, and kernel times at 1k
# / 2k. Sink (issue 27): kernel times of main with and without a learnable sink at d128 4k / 8k / 16k,
# then the features bench's sink rows, four rounds.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-580} ))
B=.after-s49
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m','s']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/s.so --name fwd-s --timeout 60 -k "short_masked or lone or end_aligned or head_dims"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/s.so --name fwd-s --sanitize memcheck --timeout 60 -k "short_masked or lone"
tail -1 $OUT/t/summary.txt
python3 scripts/gpu.py --out $OUT/ab bench forward --lib $B/m.so --compare short:$B/s.so --timeout 90 -- --shapes mha --hdims 64 --seqlens 1024,2048,4096 --rounds 3 | tail -16
FLASHATTN_LIBRARY=$PWD/$B/m.so timeout 60 python3 bench/gpu_kernels.py --out $OUT/k64 --d 64 --shapes 1024x16x32x32,2048x8x32x32 --causal both --directions forward --reps 5 --lib short:$B/s.so | grep "=="
python3 scripts/gpu.py --out $OUT/x bench features --lib $B/m.so --timeout 90 -- --kinds sink --rounds 4 | tail -14
cd $OUT && tar czf all.tgz t ab k64 x && rm -rf t ab k64 x
