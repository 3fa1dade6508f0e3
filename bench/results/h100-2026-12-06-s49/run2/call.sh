#!/bin/bash
# Session 49 call G: main's backward grid (m.so), two rounds (the top-level record's second run); then
# deterministic GQA d128 at 1k-4k with the whole group's walk (backward_gqa=kv_major) timed beside the
# planner's choice (pairs of heads under a causal mask past 1024 keys), three rounds.
B=.after-s49
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/m.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/m.so --timeout 330 -- --rounds 2 | tail -3
python3 scripts/gpu.py --out $OUT/w bench backward --lib $B/m.so --timeout 150 -- --shapes gqa --hdims 128 --seqlens 1024,2048,4096 --rounds 3 --det-variant walk:backward_gqa=kv_major | tail -3
cd $OUT && tar czf b.tgz b w && rm -rf b w
