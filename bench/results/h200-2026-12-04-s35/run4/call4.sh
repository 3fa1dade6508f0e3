#!/bin/bash
# Session 35 call 4: K/V loads (kv) and dK/dV stores (kvs: both) by TMA in the Hopper backward, against main.
export GPU_DEADLINE_AT=$(( $(date +%s) + 570 ))
A=.after-s35a
python3 - <<'PY'
import lzma, pathlib
for n in ["main", "kv", "kvs"]:
    pathlib.Path(f".after-s35a/{n}.so").write_bytes(lzma.decompress(pathlib.Path(f".after-s35a/{n}.so.xz").read_bytes()))
PY
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/kvs.so --name bwd-kvs -k "128 or strided or larger or empty or large_grid or race or reused or bitwise or seqused"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/kvs.so --name bwd-kvs-memcheck --sanitize memcheck -k "(dense and 128) or strided or larger or empty"
python3 scripts/gpu.py --out $OUT/b bench backward --lib $A/kvs.so --compare main:$A/main.so --compare kv:$A/kv.so -- --hdims 128 --rounds 3
cd $OUT && tar czf all.tgz b t && rm -rf b t
