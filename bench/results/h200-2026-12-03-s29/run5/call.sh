#!/bin/bash
# Device call: GQA's dK / dV added per KV head (branch bwd-dkv-add; 128;192;256, archs 90) against
# main (b9aca45's library, every head dim), in one process; the branch's GPU tests of the backward.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=bwd-dkv-add
python3 - <<'P'
import lzma, shutil
for name in ("main", "add"):
    with lzma.open(f".after-add/{name}.xz") as src, open(f".after-add/{name}.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
A=.after-add/add.so
python3 scripts/gpu.py --out $OUT pytest tests/gpu/test_backward.py --lib $A --name add-backward
python3 scripts/gpu.py --out $OUT pytest tests/gpu/test_value_dim_sink.py --lib $A --name add-value-dim-sink
python3 scripts/gpu.py --out $OUT bench backward --lib $A --compare main:.after-add/main.so --show 40 -- --quick --shapes gqa --hdims 128,256 --seqlens 1024,2048,4096,16384 --rounds 2
python3 scripts/gpu.py --out $OUT summary > /dev/null
