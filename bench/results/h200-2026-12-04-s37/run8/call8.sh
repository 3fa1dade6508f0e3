#!/bin/bash
# Session 37 call 8: the branch as it will be merged (ordered dQ: the two dQ warps by turns, the hand-off in boxes
# added by bulk tensor reductions through the 5-D map; default instances: dq_full per block parity, rows as before),
# every Hopper head dim (64;128;192;256). Tests: test_backward, test_value_dim_sink, memcheck of the ordered dQ at
# every head dim and of 192 / 128 and d256's dense and varlen cases; then CUPTI main-kernel times against main
# 6f45acf (two rounds alternating, d128); the backward grid (`bench backward -- --rounds 2`, every shape, with its
# deterministic column).
export GPU_DEADLINE_AT=$(( $(date +%s) + 590 ))
A=.after-s37
export FLASHATTN_COMMIT=$(cat $A/commit.txt)
python3 -c "
import lzma,pathlib
for n in ['main','all6']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/all6.so --name bwd-all6 --timeout 300
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $A/all6.so --name vds-all6 --timeout 200
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/all6.so --name bwd-all6-memcheck --sanitize memcheck --timeout 300 -k "ordered_dq or (dense and 256 and not 512 and not 1024) or varlen"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $A/all6.so --name vds-all6-memcheck --sanitize memcheck --timeout 200 -k "value_dim_backward"
cat $OUT/t/summary.txt
for r in 1 2; do for lib in main all6; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 100 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
python3 scripts/gpu.py --out $OUT/b bench backward --lib $A/all6.so -- --rounds 2 | tail -3
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t b && rm -rf t b
