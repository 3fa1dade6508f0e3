#!/bin/bash
# Session 56: k128 = main (192 only) with 192 / 128's backward at 128 keys a CTA (64 a consumer; P and dS
# in one buffer, dP issued once P is in 16 bits, dV^T under the dS arithmetic). Tests (192 / 128
# backward, also deterministic), memcheck on a few, the value_dim rows (m ours, k128 --lib). k96 = main (192
# only) with only the early dV^T (96 keys, P and dS in buffers of their own): what the reorder alone gives.
S=.after-s56
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-230} ))
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','k128.so','k96.so']:
    p=pathlib.Path('$S/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$S/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $S/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $S/k128.so --name k128 --timeout 60 -k "backward_192_128" | tail -3
sed -i 's/for direction in ("forward", "backward"):/for direction in ("backward",):/' bench/gpu_features.py  # the backward only (the forward is the same code)
python3 scripts/gpu.py --out $OUT/x bench features --lib $S/m.so --timeout 130 -- --kinds value_dim --alternate 3 --lib k128:$S/k128.so --lib k96:$S/k96.so | tail -14
