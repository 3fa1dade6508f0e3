#!/bin/bash
# Session 36 call 1: where deterministic mode's time goes on main 6f45acf: Nsight Compute with source counters,
# d128 16 x 1k, the default (ours_sm90) and the ordered dQ (ours_det), our kernels only.
A=.after-s36
python3 -c "
import lzma,pathlib
for n in ['main']:
    p=pathlib.Path(f'$A/{n}.so')
    if not p.exists(): p.write_bytes(lzma.decompress(pathlib.Path(f'$A/{n}.so.xz').read_bytes()))"
python3 scripts/gpu.py --out $OUT/p profile backward --lib $A/main.so --shapes "d128n1k" --impls "ours_sm90 ours_det" --export det --timeout 400 | tail -3
ls -la $OUT/p
cd $OUT/p && xz -T8 -6 *source.csv; rm -f *.ncu-rep; cd $OUT && tar cf prof.tar p && rm -rf p
