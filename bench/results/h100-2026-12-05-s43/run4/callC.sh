#!/bin/bash
# Call C (optional, diagnosis; any tree; carry [".after-s42"]): where d256's ordered dQ loses its ~15% (deterministic /
# default 0.85-0.86 at every length of the MHA grid, so a per-block cost). Nsight Compute with source counters over
# main's d256 backward, default (ours_sm90) and deterministic (ours_det: the ordered instance), 8/8 heads at 4k, causal
# and not; then each launch's stall samples by source line (bench/ncu_stalls.py).
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
B=.after-s42
export FLASHATTN_COMMIT=$(cat $B/main.commit)
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/main.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/main.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/p profile backward --lib $B/main.so --shapes "d256c4k d256n4k" \
   --impls "ours_sm90 ours_det" --export d256 --timeout 450
python3 bench/ncu_stalls.py $OUT/p/d256-ours-source.csv bwd_kernel_sm90_pds 30 > $OUT/stalls-d256.txt 2>&1
head -120 $OUT/stalls-d256.txt
cd $OUT && rm -f p/*.ncu-rep && tar czf profile.tgz p && rm -rf p
