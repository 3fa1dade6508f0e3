#!/bin/bash
# Device call: main's code (c8cc5ab's library and CLI, every head dim, archs 90, built on the 2-core
# machine): the CLI's checked smoke problems, compute-sanitizer memcheck and racecheck over the CLI's
# small problems, the inference GPU tests.
export GPU_DEADLINE_AT=$(( $(date +%s) + 585 ))
cd "$(dirname "$0")/.."
export FLASHATTN_COMMIT=c8cc5ab
B=.after-s30e/build
python3 - <<'P'
import lzma, shutil, pathlib, os
for name, dest in (("lib", ".after-s30e/build/src/libflashattn.so.0"), ("cli", ".after-s30e/build/tools/cli/flashattn-cli")):
    pathlib.Path(dest).parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(f".after-s30e/{name}.xz") as src, open(dest, "wb") as dst: shutil.copyfileobj(src, dst)
os.chmod(".after-s30e/build/tools/cli/flashattn-cli", 0o755)
os.symlink("libflashattn.so.0", ".after-s30e/build/src/libflashattn.so")
P
G="python3 scripts/gpu.py --out $OUT"
$G smoke --build-dir $B
$G pytest tests/gpu/test_inference.py --lib $B/src/libflashattn.so --name inference
$G sanitize-cli --build-dir $B
$G summary
