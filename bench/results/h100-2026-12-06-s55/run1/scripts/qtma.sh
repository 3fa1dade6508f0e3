#!/bin/bash
# Session 54 (prepared): Q by TMA from 8k keys rechecked. See README.txt.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
S=.after-s54
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m128.so','nq128.so']:
    p=pathlib.Path('$S/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$S/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $S/m.commit)
mkdir -p $OUT/t
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $S/nq128.so --name nq --timeout 120 -k "128" | tail -2
python3 scripts/gpu.py --out $OUT/f bench forward --lib $S/m128.so --timeout 200 -- --hdims 128 --seqlens 4096,8192,16384 --alternate 3 --rounds 40 --lib nq:$S/nq128.so | tail -20
cd $OUT && tar czf all.tgz t f && rm -rf t f
