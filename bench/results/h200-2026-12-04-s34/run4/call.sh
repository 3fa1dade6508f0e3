#!/bin/bash
# Device call 4: walk = branch bwd-walk-tail (the causal grid's key-major tail on the GQA walk
# bounded by one head's rows: 40 pairs at 64/8 1k instead of 5), head dim 128, against main 5d9923c.
export GPU_DEADLINE_AT=$(( $(date +%s) + 500 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("walk", "main"):
    with lzma.open(f".after-s34a/{name}.xz") as src, open(f".after-s34a/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s34a/walk.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=bwd-walk-tail
$G pytest tests/gpu/test_backward.py --lib $L --name bwd -k "gqa and 128"
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --compare main:.after-s34a/main.so --show 60 -- --hdims 128 --shapes gqa --seqlens 1024,2048,4096 --rounds 3
cat $OUT/b/summary.txt >> $OUT/summary.txt
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
