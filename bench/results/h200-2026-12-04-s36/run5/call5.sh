#!/bin/bash
# Session 36 call 5: p3 = the persistent backward with the item's last dQ added at the next item's start
# (after its decode and set-up, before its K / V wait; the ordered dQ's arrivals at once again; head dim 128)
# (head dim 128): test_backward, the value-dim / sink tests, CUPTI kernel times (two rounds alternating).
A=.after-s36
python3 -c "
import lzma,pathlib
for n in ['main','p3']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/p3.so --name bwd-p3 --timeout 150 -k "128 or dense or determin or varlen or empty or gqa"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $A/p3.so --name vds-p3 --timeout 120 -k "not 192 and not 256"
for r in 1 2; do for lib in main p3; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 90 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
cat $OUT/t/summary.txt
grep -h "####\|bwd_kernel" $OUT/kernels.txt | cut -c1-40
cd $OUT && tar czf all.tgz t && rm -rf t
