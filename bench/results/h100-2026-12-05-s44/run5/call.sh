#!/bin/bash
# Run 5 (same warm H100): GQA at d128 on the backward's two GQA schemes: the planner's (the group walk,
# kv_major, up to 2k keys) against backward_gqa=scratch (a CTA per query head, dK / dV added per KV head).
B=.after-s44; python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/rr.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/rr.so.xz').read_bytes()))"
export GPU_DEADLINE_AT=$(( $(date +%s) + 120 )); export FLASHATTN_COMMIT=$(cat $B/rr.commit)
python3 scripts/gpu.py --out $OUT/g2 bench backward --lib $B/rr.so --timeout 110 -- --rounds 3 --hdims 128 \
  --shapes gqa --seqlens 1024,2048,4096,8192 --variant scratch:backward_gqa=scratch
