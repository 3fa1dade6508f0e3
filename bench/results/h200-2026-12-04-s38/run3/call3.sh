#!/bin/bash
# Session 38 call 3. (a) main4b = main c23ba7c at 64;128;192;256 (call 2's main4 had a stale device_info object: its
# tile dims lacked 64, so d64 ran padded on the d128 kernel): d64 tests and memcheck, kernel times against od64
# (KP_D=64), the d64 backward grid rows. (b) d256w = branch bwd-d256-walk (the ordered dQ on d256's GQA walk, one dQ
# thread), head dim 256: tests, memcheck, kernel times against main4b (KP_D=256). (c) secmb = main4b + a measuring
# hook (overrides' cpu_bwd_block_k = the section budget in MB, default 40): d128 kernel times at 16/16 1k, 32/8 1k and
# 2k, 16/16 16k for 40, 32, 24, 16 MB; d256 8/8 1k for 40, 24, 16 MB.
export GPU_DEADLINE_AT=$(( $(date +%s) + 590 ))
B=.after-s38
export FLASHATTN_COMMIT=$(cat $B/commit.txt)
python3 -c "
import lzma,pathlib
for n in ['main4b','d256w','secmb','od64']:
    p=pathlib.Path(f'$B/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$B/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/main4b.so --name bwd-main4b-d64 --timeout 150 -k "64 and not 256 and not (ordered_dq_gqa and 256)"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/main4b.so --name bwd-main4b-d64-memcheck --sanitize memcheck --timeout 150 -k "64 and not 256 and (ordered_dq or determin or varlen or dense)"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/d256w.so --name bwd-d256w --timeout 150 -k "256 and (determin or ordered or race or varlen or dense or gqa)"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/d256w.so --name bwd-d256w-memcheck --sanitize memcheck --timeout 150 -k "256 and (ordered_dq or determin or gqa)"
cat $OUT/t/summary.txt
for r in 1 2; do for lib in od64 main4b; do
  echo "#### $lib round $r" >> $OUT/kernels-d64.txt
  KP_D=64 KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$B/$lib.so PYTHONPATH=$PWD/python timeout 40 python3 $B/kernels.py >> $OUT/kernels-d64.txt 2>&1
done; for lib in main4b d256w; do
  echo "#### $lib round $r" >> $OUT/kernels-d256.txt
  KP_D=256 KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$B/$lib.so PYTHONPATH=$PWD/python timeout 40 python3 $B/kernels.py >> $OUT/kernels-d256.txt 2>&1
done; done
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/main4b.so -- --hdims 64 --shapes mha --rounds 2 | tail -2
for r in 1 2; do for mb in 0 32 24 16; do
  echo "#### sec$mb round $r" >> $OUT/kernels-secmb.txt
  FLASHATTN_OVERRIDES="cpu_blocks=0x0x0x${mb}" KP_SHAPES=1024x16x16x16,1024x16x32x8,2048x8x32x8,16384x1x16x16 KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$B/secmb.so PYTHONPATH=$PWD/python timeout 60 python3 $B/kernels.py >> $OUT/kernels-secmb.txt 2>&1
done; for mb in 0 24 16; do
  echo "#### sec$mb round $r" >> $OUT/kernels-secmb256.txt
  FLASHATTN_OVERRIDES="cpu_blocks=0x0x0x${mb}" KP_D=256 KP_SHAPES=1024x16x8x8 KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$B/secmb.so PYTHONPATH=$PWD/python timeout 30 python3 $B/kernels.py >> $OUT/kernels-secmb256.txt 2>&1
done; done
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t b && rm -rf t b
