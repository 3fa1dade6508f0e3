#!/bin/bash
# Device call 4 (EXPERIMENT, branch exp-edge-timeline, head dim 128 only): clock64 stamps at the
# Hopper forward's tile edges, 1k / 2k / 16k non-causal and 1k causal at d128.
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
with lzma.open(".after-s33a/tl.xz") as src, open(".after-s33a/tl.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
export FLASHATTN_LIBRARY=$PWD/.after-s33a/tl.so PYTHONPATH=$PWD/python
python3 .after-s33a/timeline.py 2>&1 | tee $OUT/timeline.txt
