#!/bin/bash
# Device call: where the 1k forward's time goes on main (d64 and d128, 1k against 16k), source-level
# stall summaries written on the device (the reports themselves stay there).
export GPU_DEADLINE_AT=$(( $(date +%s) + 200 ))
cd "$(dirname "$0")/.."
python3 - <<'P'
import lzma, shutil
with lzma.open(".after-prof/lib.xz") as src, open(".after-prof/lib.so", "wb") as dst: shutil.copyfileobj(src, dst)
P
L=.after-prof/lib.so
S=$(mktemp -d)
python3 scripts/gpu.py --out $S profile forward --lib $L --shapes "d64n1k d64n16k d128n1k d128n16k" --impls ours_sm90 --export pf
python3 bench/ncu_stalls.py $S/pf-ours-source.csv "Sm90FwdTraits<64" 45 --diff > $OUT/stalls-fwd-d64-1k-vs-16k.txt 2>&1
python3 bench/ncu_stalls.py $S/pf-ours-source.csv "Sm90FwdTraits<128" 45 --diff > $OUT/stalls-fwd-d128-1k-vs-16k.txt 2>&1
python3 bench/ncu_stalls.py $S/pf-ours-source.csv "Sm90FwdTraits" 30 > $OUT/stalls-fwd-all-launches.txt 2>&1
grep -E "Duration|Elapsed Cycles|Executed Instructions |<0," $S/profile-forward.log > $OUT/profile-forward-summary.txt
tail -3 $S/summary.txt
