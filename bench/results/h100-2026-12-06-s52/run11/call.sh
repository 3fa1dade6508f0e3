#!/bin/bash
# Session 52 exp 11. x = main with the kept rule as committed (Q by TMA from 8k keys where the next
# tile's Q loads a tile ahead or a CTA computes one tile; every head dim): test_forward, and
# memcheck over test_q_by_tma_past_8k_keys.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-150} ))
B=.after-s52
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/x.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/x.so.xz').read_bytes()))"
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x --timeout 60
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $B/x.so --name fwd-x-memcheck --sanitize memcheck --timeout 60 -k "q_by_tma"
cat $OUT/t/summary.txt
cd $OUT && tar czf all.tgz t && rm -rf t
