#!/bin/bash
# Run 3 (same warm H100 as run 2): RR against main with the roles swapped (main timed as "ours", rr as
# the compared library), d128 1k and 2k, five rounds: the grid's order bias cancels against run 2.
B=.after-s44; python3 -c "
import lzma,pathlib
for n in ['main','rr']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
export GPU_DEADLINE_AT=$(( $(date +%s) + 200 )); export FLASHATTN_COMMIT=$(cat $B/main.commit)
python3 scripts/gpu.py --out $OUT/c bench forward --lib $B/main.so --compare rr:$B/rr.so --timeout 190 -- \
  --rounds 5 --hdims 128 --seqlens 1024,2048
