#!/bin/bash
# Device call: main with the edge costs (all head dims, archs 90, built on the 2-core machine): the
# forward's GPU tests, the CLI's smoke problems and memcheck, the full forward grid.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=$(cat .after-full/commit)
B=.after-full/build
python3 - <<'P'
import lzma, shutil, pathlib, os
for name, dest in (("lib", ".after-full/build/src/libflashattn.so.0"), ("cli", ".after-full/build/tools/cli/flashattn-cli")):
    pathlib.Path(dest).parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(f".after-full/{name}.xz") as src, open(dest, "wb") as dst: shutil.copyfileobj(src, dst)
os.chmod(".after-full/build/tools/cli/flashattn-cli", 0o755)
os.symlink("libflashattn.so.0", ".after-full/build/src/libflashattn.so")
P

L=$B/src/libflashattn.so
python3 scripts/gpu.py --out $OUT smoke --build-dir $B
for f in forward value_dim_sink inference; do python3 scripts/gpu.py --out $OUT pytest tests/gpu/test_$f.py --lib $L --name $f; done
python3 scripts/gpu.py --out $OUT bench forward --lib $L --show 70
python3 scripts/gpu.py --out $OUT sanitize-cli --build-dir $B --tools memcheck
python3 scripts/gpu.py --out $OUT profile backward --lib $L --shapes "d256c1k d256c1kg32x4" --impls "ours_sm90 cudnn"
python3 scripts/gpu.py --out $OUT profile forward --lib $L --shapes "d64n1k d64n16k" --impls ours_sm90 --export pf
python3 bench/ncu_stalls.py $OUT/pf-ours-source.csv Sm90FwdTraits 45 --diff > $OUT/stalls-fwd-d64-1k-vs-16k.txt 2>&1
rm -f $OUT/pf-ours.ncu-rep $OUT/pf-ours-source.csv
python3 scripts/gpu.py --out $OUT summary
