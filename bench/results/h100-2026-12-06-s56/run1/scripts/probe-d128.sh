#!/bin/bash
# Session 55 (prepared, not run): session 55's x1 / x2 probes at d128 (d128-only builds of main with one
# line changed each, wrong gradients, speed only): x1-128 = Q and dO loaded only into the first two
# stages (no Q/dO traffic after), x2-128 = the default hand-off's dQ reductions never issued. What the
# d128 backward's L2 traffic costs, as session 55 measured at 192 / 128 (+1.4-6% / +3-10%). The backward
# bench records the --lib entries' gradient differences without stopping (their deterministic calls:
# x2 = main there, the ordered dQ does not take the rows' path).
S=.after-s55
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-300} ))
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader | tee -a $OUT/gpu.txt
python3 -c "
import lzma,pathlib
for n in ['m.so','x1-128.so','x2-128.so']:
    p=pathlib.Path('$S/'+n)
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$S/'+n+'.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $S/m.commit)
python3 scripts/gpu.py --out $OUT/b128 bench backward --lib $S/m.so --timeout 280 -- --hdims 128 --seqlens 1024,16384 --alternate 3 --lib x1:$S/x1-128.so --lib x2:$S/x2-128.so | tail -16
