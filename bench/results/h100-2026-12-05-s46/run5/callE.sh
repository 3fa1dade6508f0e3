#!/bin/bash
# Session 46 call E: which kernels cuDNN runs for the 192 / 128 backward (tile names, grid, shared memory)
# beside ours (t), causal and not, 16k and 4k (torch.profiler / CUPTI).
B=.after-s46
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/t.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/t.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
FLASHATTN_LIBRARY=$PWD/$B/t.so PYTHONPATH=$PWD/python:$PWD/bench timeout 150 python3 $B/kernels_vd.py > $OUT/kernels-192-128.txt 2>&1
tail -40 $OUT/kernels-192-128.txt | cut -c1-250
