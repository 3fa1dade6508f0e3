#!/bin/bash
# Device call: the Hopper forward's tiles aligned to the sequence's end under a right window edge
# (branch fwd-end-aligned; head dims 64 and 128, archs 90) against main ab1838f (every head dim) in
# one process, d64 and d128 rows; the branch's forward GPU tests (cases of other head dims fail:
# not built) and memcheck over the short, lone-tile, varlen and local-window cases.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("main", "aligned"):
    with lzma.open(f".after-s31d/{name}.xz") as src, open(f".after-s31d/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
M=.after-s31d/main.so; L=.after-s31d/aligned.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=fwd-end-aligned
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-mc --sanitize memcheck -k "d64_short or lone_tiles or (varlen and 64) or local_window or seqused"
python3 scripts/gpu.py --out $OUT/f bench forward --lib $L --compare main:$M --show 40 -- --hdims 64,128 --rounds 3
cat $OUT/f/summary.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
