#!/bin/bash
# Next session's first call (about 5 minutes). y = branch bwd-dkv-sums-default (d128 / d256 build): GQA's
# dK / dV summed in the kernel by a key block's last unit, in deterministic mode (the ordered dQ's
# grids) and, outside it, on the pairs' walk (instead of adds into zeroed rows per KV head and a
# conversion pass). m = main (every head dim, .after-s57). Tests with y (deterministic and GQA cases,
# no d64), memcheck on the pairs' cases, then the GQA backward rows at 1k / 2k / 4k (the pairs' range),
# m as ours and y as --lib, --alternate 3: y's default column changes on the causal rows with groups
# of 8 (64/8 d128, 32/4 d256), its deterministic column wherever the planner sums (causal GQA from 2k
# at 32/8, every causal row at 64/8 and 32/4). x.so.xz: the deterministic-only version (bwd-dkv-last-sums).
S=.after-s57; X=.after-s58
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for p in ['$S/m.so','$X/y.so']:
    p=pathlib.Path(p)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(str(p)+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $S/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $X/y.so --name bwd-y --timeout 80 -k "(deterministic or gqa) and not 64" | tail -1
grep -E "^FAILED|^E  " $OUT/t/bwd-y.log | head -8
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $X/y.so --name bwd-y-memcheck --sanitize memcheck --timeout 50 -k "pairs_at_groups or (gqa_schemes and kv_pairs and 128)" | tail -1
python3 scripts/gpu.py --out $OUT/b bench backward --lib $S/m.so --timeout 150 -- --hdims 128,256 --shapes gqa --seqlens 1024,2048,4096 --alternate 3 --lib y:$X/y.so | tail -20
