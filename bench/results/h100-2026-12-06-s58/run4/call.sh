#!/bin/bash
# Session 58: x = branch bwd-dkv-last-sums (d128 / d256 build): deterministic GQA's dK / dV summed in
# the kernel by the key block's last unit (query head, or pair), which writes dk / dv; no finishing
# sum of dK / dV. m = main (every head dim). Tests with x (deterministic, GQA, varlen, workspace,
# layouts; not d64), memcheck on the pairs' deterministic cases, then the backward GQA rows at 1k / 2k,
# m as ours and x as --lib (its deterministic column is what changed), --alternate 3.
S=.after-s57; X=.after-s58
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for p in ['$S/m.so','$X/x.so']:
    p=pathlib.Path(p)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(str(p)+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $S/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $X/x.so --name bwd-x --timeout 90 -k "(deterministic or gqa or reused or misaligned) and not 64" | tail -1
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $X/x.so --name bwd-x-memcheck --sanitize memcheck --timeout 50 -k "pairs_at_groups or (varlen_gqa_pairs and 128)" | tail -1
python3 scripts/gpu.py --out $OUT/b bench backward --lib $S/m.so --timeout ${BENCH_TIMEOUT:-140} -- --hdims 128,256 --shapes gqa --seqlens 1024,2048 --alternate 3 --lib x:$X/x.so | tail -16
