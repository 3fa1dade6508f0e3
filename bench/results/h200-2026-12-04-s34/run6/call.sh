#!/bin/bash
# Device call 6: a measuring build (main 03715f5 plus run 5's clock64 stamps of session 33, with a
# slot for each of d64's four warpgroups; head dim 64 only): the d64 tile edge, 1k x 16 and 16k x 1,
# causal and not.
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
with lzma.open(".after-s34a/tl64.xz") as src, open(".after-s34a/tl64.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
FLASHATTN_LIBRARY=$PWD/.after-s34a/tl64.so PYTHONPATH=$PWD/python timeout 200 python3 .after-s34a/timeline64.py > $OUT/timeline64.txt 2>&1
cat $OUT/timeline64.txt
