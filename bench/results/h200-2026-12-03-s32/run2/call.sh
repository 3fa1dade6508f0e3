#!/bin/bash
# Device call 3: the Hopper forward's tile edge (branch fwd-edge-overlap: the next tile decoded and
# this tile's row factors / lse taken while its last P V runs, the epilogue's first barrier left to
# the tile's turns, the next tile published as the tile before it starts; head dims 64 and 128,
# arch 90) against main 97d4f98 (libraries of head dim 64 and of 128) in one process each; the
# branch's forward GPU tests (other head dims fail: not built), the sink tests, memcheck and
# racecheck over d64 / d128 cases.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("main", "main128", "edge"):
    with lzma.open(f".after-s32a/{name}.xz") as src, open(f".after-s32a/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s32a/edge.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=fwd-edge-overlap
$G pytest tests/gpu/test_forward.py --lib $L --name fwd
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds -k "sink"
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-mc --sanitize memcheck -k "(dense and (64 or 128)) or d64_short or lone_tiles or end_aligned or local_window or (varlen and 128) or seqused or misaligned or output_view"
$G pytest tests/gpu/test_forward.py --lib $L --name fwd-rc --sanitize racecheck -k "(d64_short and causal_1k) or misaligned or (end_aligned and 300x300-128)"
python3 scripts/gpu.py --out $OUT/f64 bench forward --lib $L --compare main:.after-s32a/main.so --show 30 -- --hdims 64 --rounds 3
python3 scripts/gpu.py --out $OUT/f128 bench forward --lib $L --compare main:.after-s32a/main128.so --show 40 -- --hdims 128 --rounds 3
cat $OUT/f64/summary.txt $OUT/f128/summary.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
