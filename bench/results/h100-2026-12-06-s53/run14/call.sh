#!/bin/bash
# Session 53 exp 14. exp 13's A/A (m as ours, a copy of m as --lib; d128 at 1k and 16k, --alternate 3) with
# the bench's sm80 column removed for this run (sed on the device's copy of bench/gpu_forward.py): is the
# --lib entry's +2% at 16k the sm80 column's override turns on ours' library?
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
B=.after-s53
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/m.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/m.so.xz').read_bytes()))"
cp $B/m.so $B/a.so
sed -i 's/for label, spec in \[("sm80", "forward_kernel=sm80"), \*variants\]/for label, spec in [*variants]/' bench/gpu_forward.py
grep -n "for label, spec in" bench/gpu_forward.py
export FLASHATTN_COMMIT=$(cat $B/m.commit)
python3 scripts/gpu.py --out $OUT/f bench forward --lib $B/m.so --timeout 200 -- --hdims 128 --seqlens 1024,16384 --alternate 3 --lib a:$B/a.so | tail -14
cd $OUT && tar czf all.tgz f && rm -rf f
