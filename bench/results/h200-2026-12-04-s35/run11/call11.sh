#!/bin/bash
# Session 35 call 11: the d128 backward grid (MHA, 32/8, 64/8) on main 55367b4's backward (stsm library, head dims 64 and 128).
A=.after-s35a
python3 -c "import lzma,pathlib; pathlib.Path('$A/stsm.so').write_bytes(lzma.decompress(pathlib.Path('$A/stsm.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=3ae0834
python3 scripts/gpu.py --out $OUT/b bench backward --lib $A/stsm.so --timeout 200 -- --hdims 128 --rounds 2 | tail -40
cd $OUT && tar czf all.tgz b && rm -rf b
