#!/bin/bash
# Session 58, second x: the units' fences before the count, no L2 discard. Tests of the summed cases,
# then the deterministic rows it changes (causal GQA 2k at d128, 32/4 causal 1k / 2k at d256).
S=.after-s57; X=.after-s58
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-220} ))
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for p in ['$S/m.so','$X/x.so']:
    p=pathlib.Path(p)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(str(p)+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $S/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $X/x.so --name bwd-x2 --timeout 60 -k "(deterministic or gqa_pairs) and not 64" | tail -1
grep -E "^FAILED|^E  " $OUT/t/bwd-x2.log | head -8
python3 scripts/gpu.py --out $OUT/b bench backward --lib $S/m.so --timeout 110 -- --hdims 128,256 --shapes gqa --seqlens 1024,2048 --alternate 3 --lib x:$X/x.so | tail -14
