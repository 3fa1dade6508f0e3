#!/bin/bash
# Device call 6: (a) main 8ba5e23 at head dims 192 (with 192 / 128) and 256, whose kernels the two-Q-buffer
# change re-laid (barriers; one Q buffer there): forward and value-dim / sink tests, memcheck over their
# causal and end-aligned cases; (b) er2 = branch fwd-early-rows2 (W again, on two Q buffers; head dim
# 128) against main 120b590's library (qd) in one process, and its d128 tests.
export GPU_DEADLINE_AT=$(( $(date +%s) + 330 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
for name in ("wide", "er2", "qd"):
    with lzma.open(f".after-s33a/{name}.xz") as src, open(f".after-s33a/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
G="python3 scripts/gpu.py --out $OUT"
W=.after-s33a/wide.so
$G pytest tests/gpu/test_forward.py --lib $W --name fwd-wide -k "136 or 160 or 192 or 200 or 224 or 248 or 256 or long_sequences"
$G pytest tests/gpu/test_value_dim_sink.py --lib $W --name vds-wide -k "192 or 256"
$G pytest tests/gpu/test_forward.py --lib $W --name fwd-wide-mc --sanitize memcheck -k "(dense and causal and (192 or 256) and not 1024) or (end_aligned and 192)"
export FLASHATTN_COMMIT=fwd-early-rows2
python3 scripts/gpu.py --out $OUT/f bench forward --lib .after-s33a/er2.so --compare main:.after-s33a/qd.so --show 40 -- --hdims 128 --rounds 3
$G pytest tests/gpu/test_forward.py --lib .after-s33a/er2.so --name fwd-er2 -k "128"
cat $OUT/f/summary.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf /tmp/all.tgz . && mv /tmp/all.tgz all.tgz; find . -mindepth 1 ! -name all.tgz ! -name summary.txt -delete 2>/dev/null; true
cat $OUT/summary.txt
