#!/bin/bash
# Session 35 call 7: main (full library) grids: forward and backward (every shape, --rounds 2), features (--rounds 3).
export GPU_DEADLINE_AT=$(( $(date +%s) + 580 ))
A=.after-s35a
python3 -c "import lzma,pathlib; pathlib.Path('$A/full.so').write_bytes(lzma.decompress(pathlib.Path('$A/full.so.xz').read_bytes()))"
export FLASHATTN_COMMIT=$(cat $A/commit.txt)
python3 scripts/gpu.py --out $OUT/f bench forward --lib $A/full.so -- --rounds 2 | tail -3
python3 scripts/gpu.py --out $OUT/b bench backward --lib $A/full.so -- --rounds 2 | tail -3
python3 scripts/gpu.py --out $OUT/x bench features --lib $A/full.so -- --rounds 3 | tail -3
cd $OUT && tar czf all.tgz f b x && rm -rf f b x
