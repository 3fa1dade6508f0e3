#!/usr/bin/env bash
# Put the CUTLASS/CuTe headers (header-only) under third_party/cutlass/include, from PyPI's
# nvidia-cutlass wheel at a pinned version. Idempotent; only the CUDA backend needs them.
set -euo pipefail
CUTLASS_VERSION=4.2.0.0
root=$(cd "$(dirname "$0")/.." && pwd)
dest="$root/third_party/cutlass"
if [ -f "$dest/VERSION" ] && [ "$(cat "$dest/VERSION")" = "$CUTLASS_VERSION" ]; then exit 0; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cutlass==$CUTLASS_VERSION"
rm -rf "$dest" && mkdir -p "$dest"
python3 - "$tmp"/nvidia_cutlass-*.whl "$dest" <<'PY'
import sys, zipfile, os
wheel, dest = sys.argv[1], sys.argv[2]
marker = "cutlass_library/source/include/"
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if marker in name and not name.endswith("/"):
            out = os.path.join(dest, "include", name.split(marker, 1)[1])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "wb") as f:
                f.write(z.read(name))
PY
echo "$CUTLASS_VERSION" > "$dest/VERSION"
echo "CUTLASS $CUTLASS_VERSION headers in $dest/include"
