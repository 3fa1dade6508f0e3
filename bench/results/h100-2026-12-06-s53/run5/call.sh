#!/bin/bash
# Session 53 exp 5. A timeline of the d128 forward's tiles on main's kernel (6a8ccff) with clock64 stamps
# (branch exp-edge-timeline-s53, a measuring build, d128 only): per consumer and tile, the phases from
# the tile's top to its O store, the back edge, both consumers' time outside their steps; non-causal 1k /
# 2k / 16k, GQA 64/8 1k, causal 1k / 4k.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/tl.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/tl.so.xz').read_bytes()))"
FLASHATTN_LIBRARY=$PWD/$B/tl.so PYTHONPATH=$PWD/python timeout 240 python3 $B/timeline.py > $OUT/timeline.txt 2>&1
cat $OUT/timeline.txt
