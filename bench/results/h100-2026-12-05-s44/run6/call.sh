#!/bin/bash
# Run 6 (same warm H100): the deterministic call on the two GQA schemes (the group walk with the ordered
# dQ against backward_gqa=scratch), d128 GQA 1k and 2k.
B=.after-s44; python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/rr.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/rr.so.xz').read_bytes()))"
export GPU_DEADLINE_AT=$(( $(date +%s) + 100 )); export FLASHATTN_COMMIT=$(cat $B/rr.commit)
python3 scripts/gpu.py --out $OUT/g3 bench backward --lib $B/rr.so --timeout 90 -- --rounds 2 --hdims 128 \
  --shapes gqa --seqlens 1024,2048 --det-variant dscratch:backward_gqa=scratch
