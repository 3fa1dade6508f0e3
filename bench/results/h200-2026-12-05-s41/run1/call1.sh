#!/bin/bash
# Session 41 call 1. dq = branch bwd-dq-in-kernel (the Hopper backward converts dQ in its items' last CTAs, items of
# at most 4 MB of scratch), main = d39562d (session 40's merged library). (1) dq: test_backward (with the new
# test_dq_conversion*), test_value_dim_sink, memcheck over the conversion tests and the varlen / ordered ones;
# (2) CUPTI kernel time per call (all kernels), main / dq alternating, two rounds, at d128, d64, d256.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
B=.after-s41
export FLASHATTN_COMMIT=$(cat $B/dq.commit)
python3 -c "
import lzma,pathlib
for n in ['main','dq']:
    p=pathlib.Path('$B/'+n+'.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path('$B/'+n+'.so.xz').read_bytes()))"
G="python3 scripts/gpu.py --out $OUT/t"
$G pytest tests/gpu/test_backward.py --lib $B/dq.so --name bwd-dq --timeout 100
$G pytest tests/gpu/test_value_dim_sink.py --lib $B/dq.so --name vds-dq --timeout 60
$G pytest tests/gpu/test_backward.py --lib $B/dq.so --name bwd-dq-memcheck --sanitize memcheck --timeout 120 -k "dq_conversion or ordered_dq_varlen or (varlen and not seqused)"
cat $OUT/t/summary.txt
for d in 128 64 256; do for r in 1 2; do for lib in main dq; do
  echo "#### $lib round $r" >> $OUT/kernels$d.txt
  KP_D=$d KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$B/$lib.so PYTHONPATH=$PWD/python timeout 50 python3 $B/kernels.py >> $OUT/kernels$d.txt 2>&1
done; done; python3 $B/totals.py $OUT/kernels$d.txt; done
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t && rm -rf t
