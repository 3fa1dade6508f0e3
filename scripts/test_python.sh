#!/usr/bin/env bash
# Build and install the Python package (pip install . -> scikit-build-core -> the CMake project), then
# run its tests (tests/python, pytest). Extra arguments go to pytest. Safe to run repeatedly: the venv
# and the CMake build folder (build-py/) are reused, so a second run rebuilds only what changed.
#   FLASHATTN_PYTHON    interpreter to make the venv with (default: python3)
#   FLASHATTN_VENV      the venv (default: build-py/venv)
#   FLASHATTN_CUDA      ON / OFF / AUTO for the library build (default AUTO: the CUDA backend too
#                       when nvcc and a GPU are found, as for any `pip install .`)
#   FLASHATTN_HEADDIMS  CUDA head dims to build (default: the CMake default, all)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv=${FLASHATTN_VENV:-$root/build-py/venv}
python=${FLASHATTN_PYTHON:-python3}
torch_pin=$(sed -n 's/^torch==//p' "$root/python/requirements-test.txt")
elapsed() { echo "$(( $(date +%s) - $1 )) s"; }

# torch: reuse the interpreter's own when it is the pinned version (machine images ship it), which
# takes seconds; otherwise a clean venv gets it from PyPI with its CUDA libraries, which takes minutes.
start=$(date +%s)
venv_dir=$(dirname "$venv")
# pip's cache would keep a second copy of torch's ~3 GB of wheels, and its unpacking goes through
# TMPDIR: no cache, and temporary files beside the venv, so a small /tmp or home cannot cut the
# install short.
export PIP_NO_CACHE_DIR=1
export TMPDIR=$venv_dir/tmp
mkdir -p "$TMPDIR"
free_gb() { df -Pk "$venv_dir" | awk 'NR == 2 { printf "%.1f", $4 / 1048576 }'; }
if [ ! -x "$venv/bin/python" ]; then
    if "$python" -c "import sys, torch; sys.exit(torch.__version__.split('+')[0] != '$torch_pin')" 2>/dev/null; then
        echo "test_python: venv $venv reusing $("$python" -c 'import torch; print(torch.__file__)')"
        "$python" -m venv --system-site-packages "$venv"
    else
        echo "test_python: venv $venv with torch==$torch_pin from PyPI (large download; about 8 GB" \
             "of disk while it installs, $(free_gb) GB free there)"
        "$python" -m venv "$venv"
    fi
fi
if ! "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$root/python/requirements-test.txt"; then
    echo "test_python: installing python/requirements-test.txt into $venv failed;" \
         "$(free_gb) GB free there now (torch with its CUDA libraries needs about 8 GB)"
    exit 1
fi
echo "test_python: test dependencies ready in $(elapsed "$start")"

has_gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then has_gpu=1; fi
export FLASHATTN_CUDA=${FLASHATTN_CUDA:-AUTO}
build_args=()
if [ "$FLASHATTN_CUDA" = ON ] || { [ "$FLASHATTN_CUDA" = AUTO ] && [ "$has_gpu" = 1 ] && command -v nvcc >/dev/null; }; then
    "$root/scripts/fetch_cutlass.sh"
    if [ -n "${FLASHATTN_HEADDIMS:-}" ]; then
        build_args+=(-C "cmake.define.FLASHATTN_HEADDIMS=$FLASHATTN_HEADDIMS")
    fi
fi
start=$(date +%s)
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps "${build_args[@]}" "$root"
echo "test_python: pip install . (FLASHATTN_CUDA=$FLASHATTN_CUDA) took $(elapsed "$start")"

# The installed package, not python/flashattn: run from the tests folder, without a library override
# (pyproject.toml keeps the pytest cache in build-py/).
cd "$root/tests/python"
start=$(date +%s)
status=0
env -u FLASHATTN_LIBRARY "$venv/bin/python" -m pytest -q -rs "$@" || status=$?
echo "test_python: pytest took $(elapsed "$start")"
exit "$status"
