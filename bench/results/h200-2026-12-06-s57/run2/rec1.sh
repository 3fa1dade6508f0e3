#!/bin/bash
# Session 56 (from 53) rec 1: on an H200 only, main's forward grid and the features bench by the kept method
# (mirrored balanced order after a lead-in), torch FA2 and cuDNN in the process: the top-level records.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s56
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || { echo "not an H200: stop"; exit 0; }
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/m.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 330 | tail -1
python3 scripts/gpu.py --out $OUT/x bench features --lib $B/m.so --timeout 220 | tail -1
cd $OUT && tar czf all.tgz f x && rm -rf f x
