#!/bin/bash
# Device call: main ab1838f (the key mask as bits; every head dim, archs 90): the full forward and
# backward grids against torch's FA2 and cuDNN (the top-level h200-forward / h200-backward), issue
# 27's features bench (192 / 128 against cuDNN, sinks on / off), and the forward GPU tests with the
# new lone-tile cases.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=ab1838f
python3 - <<'P'
import lzma, shutil
with lzma.open(".after-s31c/main.xz") as src, open(".after-s31c/main.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s31c/main.so
G="python3 scripts/gpu.py --out $OUT"
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --show 70
python3 scripts/gpu.py --out $OUT/b bench backward --lib $L --show 70
python3 scripts/gpu.py --out $OUT/feat bench features --lib $L --show 40 -- --quick --rounds 3
cat $OUT/f/summary.txt $OUT/b/summary.txt $OUT/feat/summary.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
