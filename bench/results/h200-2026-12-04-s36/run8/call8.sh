#!/bin/bash
# Session 36 call 8: main 6f45acf (head dim 128; the one TMA tile-copy helper of 54b537f in the forward's K / V
# loads and O store and the backward's K / V loads and dK / dV stores) on the H200: test_forward and
# test_backward's head-dim-128 cases, memcheck over a subset of both.
A=.after-s36
python3 -c "import lzma,pathlib; pathlib.Path('$A/main.so').write_bytes(lzma.decompress(pathlib.Path('$A/main.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $A/main.so --name fwd-main --timeout 150 -k "128 and not 192"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/main.so --name bwd-main --timeout 150 -k "128 and not 192"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_forward.py --lib $A/main.so --name fwd-main-memcheck --sanitize memcheck --timeout 150 -k "dense and 128 and not 192"
python3 scripts/gpu.py --out $OUT/t pytest tests/gpu/test_backward.py --lib $A/main.so --name bwd-main-memcheck --sanitize memcheck --timeout 150 -k "(dense and 128 and not 512 and not 1024) or (gqa and 128 and not scheme)"
cat $OUT/t/summary.txt
cd $OUT && cp t/summary.txt . && tar czf all.tgz t && rm -rf t
