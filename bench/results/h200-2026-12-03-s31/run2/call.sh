#!/bin/bash
# Device call: the d64 forward's lone last tiles split by keys across the three consumers (branch
# fwd-split-lone; head dim 64, archs 90) against main ab1838f (every head dim) in one process, the
# d64 rows; the branch's d64 forward GPU tests, memcheck and racecheck over the split tiles.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("main", "split"):
    with lzma.open(f".after-s31b/{name}.xz") as src, open(f".after-s31b/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
M=.after-s31b/main.so; L=.after-s31b/split.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=fwd-split-lone
$G pytest tests/gpu/test_forward.py --lib $L --name fwd -k "64 and not 128 and not 256"
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-mc --sanitize memcheck -k "d64_short or split_tiles"
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-rc --sanitize racecheck -k "(d64_short and full_1000x300 and bf16) or split_tiles"
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --compare main:$M --show 30 -- --hdims 64 --shapes mha --rounds 3
cat $OUT/f/summary.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
