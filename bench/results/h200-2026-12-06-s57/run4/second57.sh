#!/bin/bash
# Session 57 second call (k128 won): memcheck over k128's 192 / 128 backward cases (short, varlen,
# deterministic, layouts, the features); then, on an H200 only, rec1.sh.
S=.after-s56
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-540} ))
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','k128.so']:
    p=pathlib.Path('$S/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$S/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $S/m.commit)
mkdir -p $OUT/mc
python3 scripts/gpu.py --out $OUT/mc pytest tests/gpu/test_value_dim_sink.py --lib $S/k128.so --name k128mc --sanitize memcheck --timeout 300 -k "backward_192_128" 2>&1 | tail -5
grep -h -E "ERROR SUMMARY|passed|failed" $OUT/mc/*.log 2>/dev/null | sort | uniq -c | head
sed -i 's/for direction in ("forward", "backward"):/for direction in ("backward",):/' bench/gpu_features.py
python3 scripts/gpu.py --out $OUT/x bench features --lib $S/m.so --timeout 200 -- --kinds value_dim --alternate 3 --lib k128:$S/k128.so | tail -9
