#!/bin/bash
# Session 40 call 4: final = d39562d (bwd-mask-int32 head: MM held at d64 only, the forward main's again). Its
# backward tests and the value-dim / sink tests, then the backward main kernel's CUPTI times mk / final at d128 and
# d64, two rounds alternating (the device budget left no room for the grids).
export GPU_DEADLINE_AT=$(( $(date +%s) + 200 ))
B=.after-s39
export FLASHATTN_COMMIT=$(cat $B/final.commit)
python3 -c "
import lzma,pathlib
for n in ['mk','final']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
G="python3 scripts/gpu.py --out $OUT/t"
$G pytest tests/gpu/test_backward.py --lib $B/final.so --name bwd-final --timeout 60
$G pytest tests/gpu/test_value_dim_sink.py --lib $B/final.so --name vds-final --timeout 60
cat $OUT/t/summary.txt
for d in 128 64; do for r in 1 2; do for lib in mk final; do
  echo "#### $lib round $r" >> $OUT/kernels$d.txt
  KP_D=$d KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$B/$lib.so PYTHONPATH=$PWD/python timeout 30 python3 $B/kernels.py >> $OUT/kernels$d.txt 2>&1
done; done; python3 bench/results/h200-2026-12-04-s37/ratios.py $OUT/kernels$d.txt; done
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && rm -rf t
