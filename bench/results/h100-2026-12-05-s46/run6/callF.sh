#!/bin/bash
# Session 46 call F: bench/gpu_kernels.py's first run (t's library): the kernels ours and cuDNN launch for
# d128 MHA 16/16 and GQA 64/8 at 1k x 16, causal and not, forward and backward.
B=.after-s46
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/t.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/t.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/k bench kernels --lib $B/t.so --timeout 150 -- --shapes 1024x16x16x16,1024x16x64x8 | tail -3
cp $OUT/k/kernels.txt $OUT/kernels-d128-1k.txt; cp $OUT/k/bench-kernels.log $OUT/; rm -rf $OUT/k
grep "==\|cudnn_generated\|fwd_kernel\|bwd_kernel" $OUT/kernels-d128-1k.txt | cut -c1-230
