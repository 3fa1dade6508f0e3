#!/bin/bash
# Device call: (1) the forward branch at its end (fwd-consumer-ranges c8cc5ab, every head dim: the
# 128-row d64 instance retired) against main 5390758, d64 rows, in one process; its forward,
# value-dim / sink GPU tests and memcheck. (2) the ordered dQ's alternating warps (bwd-dq-alternate
# 1fbed83, head dims 128 and 192) against (1)'s library: the d128 backward rows with their
# deterministic columns; the deterministic GPU tests and memcheck. (3) the features chart redrawn.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil, os
for name in ("main", "fwd2", "alt"):
    with lzma.open(f".after-s30c/{name}.xz") as src, open(f".after-s30c/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
M=.after-s30c/main.so
F=.after-s30c/fwd2.so; A=.after-s30c/alt.so
G="python3 scripts/gpu.py --out $OUT"
export FLASHATTN_COMMIT=c8cc5ab
$G pytest tests/gpu/test_forward.py --lib $F --name fwd
$G pytest tests/gpu/test_value_dim_sink.py --lib $F --name vds
$G pytest tests/gpu/test_forward.py --lib $F --name fwd-mc --sanitize memcheck -k "d64_short or (dense and 256 and causal) or (varlen and 64)"
export FLASHATTN_COMMIT=1fbed83
$G pytest tests/gpu/test_backward.py --lib $A --name bwd-alt -k "determin or gqa or 128"
$G pytest tests/gpu/test_value_dim_sink.py --lib $A --name vds-alt -k "backward"
$G pytest tests/gpu/test_backward.py --lib $A --name bwd-alt-mc --sanitize memcheck -k "determin and 128"
python3 scripts/gpu.py --out $OUT/b bench backward --lib $A --compare fwd2:$F --show 40 -- --quick --hdims 128 --rounds 3
export FLASHATTN_COMMIT=c8cc5ab
python3 scripts/gpu.py --out $OUT/f bench forward --lib $F --compare main:$M --show 30 -- --hdims 64 --shapes mha --rounds 3
python3 bench/gpu_features.py --replot bench/results/h200-features.csv --out $OUT/feat > /dev/null 2>&1
cat $OUT/b/summary.txt $OUT/f/summary.txt >> $OUT/summary.txt 2>/dev/null
cd $OUT && tar czf all.tgz --exclude=all.tgz . ; find . -mindepth 1 ! -name all.tgz ! -name summary.txt ! -name 'fwd.log' ! -name 'bwd-alt.log' -delete 2>/dev/null; true
cat $OUT/summary.txt
