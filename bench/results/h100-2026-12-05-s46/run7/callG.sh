#!/bin/bash
# Session 46 call G: where deterministic mode's time goes at d256 causal (issue 25's lowest det / default rows):
# the kernels of ours, default and deterministic, and cuDNN, backward, 8/8 and 32/4 at 1k x 16 and 4k x 4.
B=.after-s46
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/t.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/t.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/k bench kernels --lib $B/t.so --timeout 120 -- --d 256 --causal yes \
   --directions backward --deterministic --shapes 1024x16x8x8,1024x16x32x4,4096x4x8x8 | tail -2
cp $OUT/k/kernels.txt $OUT/kernels-d256-det.txt; cp $OUT/k/bench-kernels.log $OUT/; rm -rf $OUT/k
grep "==\|bwd_kernel\|cudnn_generated\|row_sum\|dsum" $OUT/kernels-d256-det.txt | cut -c1-200
