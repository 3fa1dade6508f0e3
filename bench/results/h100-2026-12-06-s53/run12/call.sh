#!/bin/bash
# Session 53 exp 12. qt = main with Q by TMA from thread 32 at every length (kQTmaMinKeys 0; main: from
# 8k keys), d128 only, against m (main, every head dim): the d128 forward at 1k / 2k / 4k / 16k,
# --alternate 3, twice (session 52's run6 measured the same change at -1.4% without a mask at 1k-4k,
# where exp 11's stamps show the interior tile 2-4% shorter).
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-400} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','qt.so']:
    p=pathlib.Path('$B/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/m.commit)
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 180 -- --hdims 128 --seqlens 1024,2048,4096,16384 --alternate 3 --lib qt:$B/qt.so | tail -26
python3 scripts/gpu.py --out $OUT/g bench forward --lib $B/qt.so --timeout 180 -- --hdims 128 --seqlens 1024,2048,4096,16384 --alternate 3 --lib m:$B/m.so | tail -26
cd $OUT && tar czf all.tgz f g && rm -rf f g
