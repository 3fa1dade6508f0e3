#!/bin/bash
# Call C. The planner's rule (branch bwd-gqa-walk-group8: causal GQA with groups of 8 or more takes the
# dK / dV scratch) end to end: test_backward's GQA cases on it, and its d128 GQA rows at 1k / 2k against
# rr.so (main before the rule: the group walk there), one process.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-100} ))
B=.after-s44
export FLASHATTN_COMMIT=$(cat $B/g8.commit)
python3 -c "
import lzma,pathlib
for n in ['g8','rr']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/g8.so --name bwd-g8-gqa --timeout 40 -k "gqa"
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/g8.so --compare walk:$B/rr.so --timeout 50 -- \
   --hdims 128 --shapes gqa --seqlens 1024,2048 | tail -9
