#!/bin/bash
# Session 38 call 2. (a) main c23ba7c (the ordered dQ at d64 merged), every Hopper head dim (64;128;192;256):
# test_backward (but the d256 ordered walk's cases, which main lacks), test_value_dim_sink, memcheck of the ordered
# dQ at every head dim, d256 dense, varlen, the value-dim backward. (b) Branch bwd-d256-turns at head dim 256:
# d256t = d256's staged ordered dQ by two dQ threads by turns; d256tw = d256t + the ordered dQ on d256's GQA walk:
# tests and memcheck, CUPTI main-kernel times against main with KP_D=256 (two rounds alternating). (c) secw = main +
# a measuring hook (planner: overrides' cpu_bwd_block_q sets the ordered grid's section width in pairs): d128
# deterministic kernel times at 32/8 1k and 2k and 16/16 1k with the planner's sections, 33 and 132 pairs.
# (d) The backward grid of main (`bench backward -- --rounds 2`).
export GPU_DEADLINE_AT=$(( $(date +%s) + 590 ))
B=.after-s38
export FLASHATTN_COMMIT=$(cat $B/commit.txt)
python3 -c "
import lzma,pathlib
for n in ['main4','d256t','d256tw','secw']:
    p=pathlib.Path(f'$B/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$B/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/main4.so --name bwd-main4 --timeout 200 -k "not (ordered_dq_gqa and 256)"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $B/main4.so --name vds-main4 --timeout 150
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/main4.so --name bwd-main4-memcheck --sanitize memcheck --timeout 200 -k "(ordered_dq or determin or (dense and 256 and not 512 and not 1024) or varlen) and not (ordered_dq_gqa and 256)"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $B/main4.so --name vds-main4-memcheck --sanitize memcheck --timeout 150 -k "value_dim_backward"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/d256tw.so --name bwd-d256tw --timeout 150 -k "256 and (determin or ordered or race or varlen or dense or gqa)"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/d256tw.so --name bwd-d256tw-memcheck --sanitize memcheck --timeout 150 -k "256 and (ordered_dq or determin)"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/d256t.so --name bwd-d256t --timeout 100 -k "256 and determin and not gqa"
cat $OUT/t/summary.txt
for r in 1 2; do for lib in main4 d256t d256tw; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_D=256 KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$B/$lib.so PYTHONPATH=$PWD/python timeout 50 python3 $B/kernels.py >> $OUT/kernels.txt 2>&1
done; done
for r in 1 2; do for w in 0 33 132; do
  echo "#### secw$w round $r" >> $OUT/kernels-secw.txt
  FLASHATTN_OVERRIDES="cpu_blocks=0x0x${w}x0" KP_SHAPES=1024x16x32x8,2048x8x32x8,1024x16x16x16 KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$B/secw.so PYTHONPATH=$PWD/python timeout 50 python3 $B/kernels.py >> $OUT/kernels-secw.txt 2>&1
done; done
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/main4.so -- --rounds 2 | tail -3
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t b && rm -rf t b
