#!/bin/bash
# Session 40 call 2 (right after call 1, on the warm machine): the backward grid on mk (its backward is uni's:
# (a)-(c)), then the d256 GQA grid with the walk forced in deterministic mode beside the automatic scratch.
export GPU_DEADLINE_AT=$(( $(date +%s) + 400 )); B=.after-s39; export FLASHATTN_COMMIT=$(cat $B/commit-mk.txt)
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/mk.so -- --rounds 2 | tail -3
python3 scripts/gpu.py --out $OUT/w bench backward --lib $B/mk.so -- --hdims 256 --shapes gqa --rounds 2 --det-variant walk:backward_gqa=kv_major | tail -2
cd $OUT && tar czf grids.tgz b w && rm -rf b w
