#!/bin/bash
# Session 52 exp 4: Nsight Compute over x's tile schedule (ours_sm90) and its streamed code path with
# one tile a unit and no offset (ours_s1z), d128 non-causal 16k and 1k: where the streamed path waits.
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-400} ))
B=.after-s52
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/x.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/x.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/p profile forward --lib $B/x.so --shapes "d128n16k d128n1k" --impls "ours_sm90 ours_s1z" --ncu-args "--metrics lts__t_sector_hit_rate.pct,dram__bytes_read.sum,smsp__cycles_active.avg" --timeout 300 | tail -3
cd $OUT && tar czf all.tgz p && rm -rf p
