#!/bin/bash
# Session 35 call 5: CUPTI kernel times of the backward (1k, 16/16 and 64/8, causal and not): main, kv, kvs, twice each, alternating.
python3 - <<'PY'
import lzma, pathlib
for n in ["main", "kv", "kvs"]:
    pathlib.Path(f".after-s35a/{n}.so").write_bytes(lzma.decompress(pathlib.Path(f".after-s35a/{n}.so.xz").read_bytes()))
PY
for r in 1 2; do for lib in main kv kvs; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/.after-s35a/$lib.so PYTHONPATH=$PWD/python timeout 90 python3 .after-s35a/kernels.py >> $OUT/kernels.txt 2>&1
done; done
grep -h "####\|==\|bwd_kernel" $OUT/kernels.txt | cut -c1-110
