#!/bin/bash
# On an H200 only: the backward grid (with the deterministic column) of yf (branch bwd-dkv-sums-default,
# every head dim) by the kept method (mirrored balanced order after a lead-in), torch FA2 and cuDNN in
# the process: the top-level records if the branch is merged.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-585} ))
B=.after-s59
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
grep -q H200 $OUT/gpu.txt || { echo "not an H200: stop"; exit 0; }
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/yf.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/yf.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/yf.commit)
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/yf.so --timeout 560 | tail -1
cd $OUT && tar czf all.tgz b && rm -rf b
