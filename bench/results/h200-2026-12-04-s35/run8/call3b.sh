#!/bin/bash
# Session 35 call 3: the Hopper backward's per-CTA phases (measuring build exp-bwd-stamps, d128).
python3 - <<'PY'
import lzma, pathlib
pathlib.Path(".after-s35a/stamps2.so").write_bytes(lzma.decompress(pathlib.Path(".after-s35a/stamps2.so.xz").read_bytes()))
PY
FLASHATTN_LIBRARY=.after-s35a/stamps2.so PYTHONPATH=python python3 .after-s35a/stamps.py .after-s35a/stamps2.so 2>&1 | tee $OUT/stamps2.txt
