#!/bin/bash
# Session 53 exp 4. The features bench's value_dim rows timed by --alternate 3 (new in session 52, first
# GPU run): main's library (m) against cuDNN, 192 / 128 forward and backward, causal and not, 4k-16k.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/m.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
python3 scripts/gpu.py --out $OUT/x bench features --lib $B/m.so --timeout 400 -- --kinds value_dim --alternate 3 | tail -20
cd $OUT && tar czf all.tgz x && rm -rf x
