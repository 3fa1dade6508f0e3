#!/bin/bash
# Device call 2: main (head dims 128 and 192 with 192 / 128): clocks and power under sustained load
# (bench power); issue 27's features (192 / 128 against cuDNN, sinks on / off) over three rounds;
# the value-dim and sink tests.
export GPU_DEADLINE_AT=$(( $(date +%s) + 560 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("m192",):
    with lzma.open(f".after-s34a/{name}.xz") as src, open(f".after-s34a/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-s34a/m192.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=$(cat .after-s34a/rev)
$G bench power --timeout 240 --lib $L --show 40 -- --seconds 3
$G pytest tests/gpu/test_value_dim_sink.py --lib $L --name vds -k "not 256"
$G bench features --timeout 200 --lib $L --show 40 -- --rounds 3
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
