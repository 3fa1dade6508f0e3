#!/bin/bash
# Session 36 call 7: per-item clock64 stamps of p3 (the persistent backward with the item's last dQ added at
# the next item's start; a measuring build, head dim 128).
A=.after-s36
python3 -c "import lzma,pathlib; pathlib.Path('$A/st3.so').write_bytes(lzma.decompress(pathlib.Path('$A/st3.so.xz').read_bytes()))"
FLASHATTN_LIBRARY=$PWD/$A/st3.so PYTHONPATH=$PWD/python timeout 120 python3 $A/pstamps3.py $PWD/$A/st3.so > $OUT/stamps.txt 2>&1
grep -v Warn $OUT/stamps.txt
