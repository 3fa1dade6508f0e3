#!/bin/bash
# Session 35 call 6: main (full library, every head dim) tests and sanitizer.
export GPU_DEADLINE_AT=$(( $(date +%s) + 570 ))
A=.after-s35a
python3 -c "import lzma,pathlib; pathlib.Path('$A/full.so').write_bytes(lzma.decompress(pathlib.Path('$A/full.so.xz').read_bytes()))"
for f in forward backward value_dim_sink inference; do
  python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_$f.py --lib $A/full.so --name $f
done
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/full.so --name bwd-memcheck --sanitize memcheck -k "(dense and causal and not 512 and not 1024) or strided or larger or empty or head_dims or (gqa and not scheme)"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_value_dim_sink.py --lib $A/full.so --name vds-memcheck --sanitize memcheck -k "backward and 192"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $A/full.so --name fwd-memcheck --sanitize memcheck -k "(dense and 128) or d64_short or end_aligned or empty"
cat $OUT/t/summary.txt
cd $OUT && tar czf all.tgz t && rm -rf t
