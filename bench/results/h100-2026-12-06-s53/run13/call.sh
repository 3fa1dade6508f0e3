#!/bin/bash
# Session 53 exp 13. A/A for the --lib entry: main's library (m) as ours and a copy of it (a) as --lib,
# d128 forward at 1k and 16k, --alternate 3. Exp 12 read the --lib build ~2.5% faster at 16k in both
# role orders where both ran the same code.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/m.so.xz').read_bytes()))"
cp $B/m.so $B/a.so
export FLASHATTN_COMMIT=$(cat $B/m.commit)
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 200 -- --hdims 128 --seqlens 1024,16384 --alternate 3 --lib a:$B/a.so | tail -14
cd $OUT && tar czf all.tgz f && rm -rf f
