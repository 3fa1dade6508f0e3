#!/bin/bash
# Session 35 call 1: Q in registers for the d128 forward (qa: wait hoisted by ptxas, qb: held by a vote) against main.
export GPU_DEADLINE_AT=$(( $(date +%s) + 570 ))
A=.after-s35a
python3 - <<'PY'
import lzma, pathlib
for n in ["main", "qa", "qb"]:
    p = pathlib.Path(f".after-s35a/{n}.so.xz")
    pathlib.Path(f".after-s35a/{n}.so").write_bytes(lzma.decompress(p.read_bytes()))
PY
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv
python3 scripts/gpu.py --out $OUT/f bench forward --lib $A/qb.so --compare main:$A/main.so --compare qa:$A/qa.so -- --hdims 128 --rounds 3
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $A/qb.so --name fwd-qb -k "128 or dense or early or gqa"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $A/qb.so --name fwd-qb-memcheck --sanitize memcheck -k "test_dense and 128"
cd $OUT && tar czf all.tgz f t && rm -rf f t
