#!/bin/bash
# Session 38 call 1. (a) main adc13f6 (review mend; head dims 128;192;256): test_backward, test_value_dim_sink,
# memcheck of the ordered dQ / d256 / varlen and value-dim backward. (b) Branch bwd-ordered-d64 (od64: the ordered
# dQ at d64, built on bf9e1a3 + the branch): its d64 tests and memcheck, CUPTI main-kernel times against all6
# (bf9e1a3: d64 deterministic = chunks), the d64 MHA backward grid with the chunks beside it.
export GPU_DEADLINE_AT=$(( $(date +%s) + 590 ))
A=.after-s37; B=.after-s38
python3 -c "
import lzma,pathlib
for n in ['$A/all6','$A/od64','$B/main']:
    p=pathlib.Path(f'{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/main.so --name bwd-main --timeout 200
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $B/main.so --name vds-main --timeout 150
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $B/main.so --name bwd-main-memcheck --sanitize memcheck --timeout 200 -k "ordered_dq or (dense and 256 and not 512 and not 1024) or varlen"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $B/main.so --name vds-main-memcheck --sanitize memcheck --timeout 150 -k "value_dim_backward"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/od64.so --name bwd-od64 --timeout 150 -k "64 and not 256 and (determin or ordered or race or varlen or dense)"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/od64.so --name bwd-od64-memcheck --sanitize memcheck --timeout 150 -k "64 and not 256 and (ordered_dq or determin)"
cat $OUT/t/summary.txt
for r in 1 2; do for lib in all6 od64; do
  echo "#### $lib round $r" >> $OUT/kernels.txt
  KP_D=64 KP_ONLY="ours bwd" FLASHATTN_LIBRARY=$PWD/$A/$lib.so PYTHONPATH=$PWD/python timeout 50 python3 $A/kernels.py >> $OUT/kernels.txt 2>&1
done; done
python3 scripts/gpu.py --out $OUT/b bench backward --lib $A/od64.so -- --hdims 64 --shapes mha --rounds 2 --det-variant chunks:deterministic_dq=chunks | tail -3
cd $OUT && cp t/summary.txt . && tar czf tests.tgz t b && rm -rf t b
