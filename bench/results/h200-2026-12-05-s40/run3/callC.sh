#!/bin/bash
# Session 40 call 3: fin = branch bwd-mask-int32 (mk + the Hopper backward's key-block query rows taken once per
# key block, tile_key_queries; the forward's uniform operand slice reverted, it made the dense forward 1.2-2.0%
# slower in call 1). (1) fin: test_backward, test_forward, test_value_dim_sink, memcheck over the backward's local-window /
# ordered / varlen / all-features cases and the forward's causal d64 / d128; (2) CUPTI kernel times, two rounds
# alternating: backward d128 and d64 mk / fin, forward d64 and d128 main / fin; (3) the backward, forward and
# features grids on fin.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
B=.after-s39
export FLASHATTN_COMMIT=$(cat $B/fin.commit)
python3 -c "
import lzma,pathlib
for n in ['main','mk','fin']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
G="python3 scripts/gpu.py --out $OUT/t"
$G pytest tests/gpu/test_backward.py --lib $B/fin.so --name bwd-fin --timeout 90
$G pytest tests/gpu/test_forward.py --lib $B/fin.so --name fwd-fin --timeout 90
$G pytest tests/gpu/test_value_dim_sink.py --lib $B/fin.so --name vds-fin --timeout 90
$G pytest tests/gpu/test_backward.py --lib $B/fin.so --name bwd-fin-memcheck --sanitize memcheck --timeout 100 -k "local_window or ordered_dq or varlen or everything"
$G pytest tests/gpu/test_forward.py --lib $B/fin.so --name fwd-fin-memcheck --sanitize memcheck --timeout 60 -k "causal and (64 or 128) and not 1x"
cat $OUT/t/summary.txt
for d in 128 64; do for r in 1 2; do for lib in mk fin; do
  echo "#### $lib round $r" >> $OUT/kernels$d.txt
  KP_D=$d KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$B/$lib.so PYTHONPATH=$PWD/python timeout 45 python3 $B/kernels.py >> $OUT/kernels$d.txt 2>&1
done; done; python3 bench/results/h200-2026-12-04-s37/ratios.py $OUT/kernels$d.txt; done
for d in 64 128; do h=$(( 4096 / d )); for r in 1 2; do for lib in main fin; do
  echo "#### $lib round $r" >> $OUT/fwd-kernels$d.txt
  KP_D=$d KP_ONLY="ours fwd" KP_SHAPES=1024x16x${h}x${h},16384x1x${h}x${h} FLASHATTN_LIBRARY=$PWD/$B/$lib.so PYTHONPATH=$PWD/python timeout 30 python3 $B/kernels.py >> $OUT/fwd-kernels$d.txt 2>&1
done; done; python3 $B/fratios.py $OUT/fwd-kernels$d.txt; done
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && rm -rf t && cd - >/dev/null
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/fin.so -- --rounds 2 | tail -2
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/fin.so -- --rounds 2 | tail -2
python3 scripts/gpu.py --out $OUT/x bench features --lib $B/fin.so -- --rounds 2 | tail -2
cd $OUT && tar czf grids.tgz b f x && rm -rf b f x
