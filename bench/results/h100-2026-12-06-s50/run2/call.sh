#!/bin/bash
# Session 50 call 2: the features bench in full (value_dim against cuDNN, sink rows alternated), three
# rounds, with ours = $LIB (the library of the commit in $LIB.commit); on an H200 it is the top-level
# bench/results/h200-features.csv. Then, with KEEP_BWD=1, the backward grid with the same library as
# ours, two rounds (the top-level h200-backward.csv).
export GPU_DEADLINE_AT=$(( $(date +%s) + ${DEADLINE:-575} ))
B=.after-s50
LIB=${LIB:-m}
nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv,noheader > $OUT/gpu.txt
cat $OUT/gpu.txt
python3 -c "
import lzma,pathlib
p=pathlib.Path('$B/$LIB.so')
if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/$LIB.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $B/$LIB.commit)
python3 scripts/gpu.py --out $OUT/f bench features --lib $B/$LIB.so --timeout 200 -- --rounds 3 | tail -26
if [ "${KEEP_BWD:-0}" = 1 ]; then
  python3 scripts/gpu.py --out $OUT/b bench backward --lib $B/$LIB.so --timeout 200 -- --rounds 2 | tail -3
fi
cd $OUT && tar czf all.tgz f $( [ -d b ] && echo b ) && rm -rf f b
# as run: LIB=m DEADLINE=280 bash .after-s50/call2.sh (run tool, kind nvidia-h100-x1, carry .after-s50)
