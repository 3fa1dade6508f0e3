#!/usr/bin/env bash
# Download, on a machine with internet, the wheels that `pip install .` and the Python test suite
# need beyond torch, into .whl/ (gitignored), for the GPU machine, which has no internet: carry
# .whl to it and run `scripts/gpu.py pip-install`. Linux x86_64, CPython 3.12 (the GPU image's).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$root/.whl
mkdir -p "$dest"
reqs=("scikit-build-core>=0.10" $(grep -v -E '^(#|torch==|$)' "$root/python/requirements-test.txt"))
python3 -m pip download -q --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 -d "$dest" "${reqs[@]}"
# numpy comes with the GPU image's torch; leaving it out keeps .whl under the device's carry limit.
rm -f "$dest"/numpy-*.whl
du -sh "$dest"
