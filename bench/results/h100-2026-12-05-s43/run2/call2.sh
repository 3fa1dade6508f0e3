#!/bin/bash
# Call 2 (run from branch bwd-dq-dependent's tree, carry [".after-s41"]): the backward grid, dq4 against main, 2 rounds.
export GPU_DEADLINE_AT=$(( $(date +%s) + 560 )); B=.after-s41; export FLASHATTN_COMMIT=$(cat $B/dq4.commit); python3 -c "
import lzma,pathlib
for n in ['main','dq4']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/dq4.so --compare main:$B/main.so -- --rounds 2 | tail -2; cd $OUT && tar czf grid.tgz b && rm -rf b
