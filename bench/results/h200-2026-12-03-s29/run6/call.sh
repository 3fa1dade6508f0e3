#!/bin/bash
# Device call: compute-sanitizer memcheck over the GQA scratch backward (dK / dV added per KV head).
export GPU_DEADLINE_AT=$(( $(date +%s) + 230 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
with lzma.open(".after-add/add.xz") as src, open(".after-add/add.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
python3 scripts/gpu.py --out $OUT pytest tests/gpu/test_backward.py --lib .after-add/add.so --name add-memcheck --sanitize memcheck -k "gqa_schemes and scratch and not 64"
tail -5 $OUT/add-memcheck.log
