#!/usr/bin/env bash
# One wheel, several torch versions: build the package once (`pip wheel .`), then for each torch
# version make a virtual environment with that torch and the test dependencies, install the wheel
# in it and run the package's tests (tests/python) against it. The package binds the library's C
# ABI with ctypes, so one wheel must serve every torch >= 2.4 (pyproject.toml); this checks it.
#
#   scripts/check_wheel_torch_versions.sh [VERSION ...]
#
# VERSION: a torch version, or `latest` (the newest on PyPI). Default: 2.4.0 (the oldest that
# pyproject.toml allows) and latest. Prints a summary (also build-py/wheel-torch-versions.txt);
# pytest logs: build-py/wheel-torch-<VERSION>.log. Exit status 1 when any version fails.
#   FLASHATTN_PYTHON   interpreter for the venvs (default: python3; torch 2.4 has wheels for 3.8-3.12)
#   FLASHATTN_CUDA     backends of the wheel (default OFF: the CPU backend, which the tests run here)
# The venvs (build-py/venv-torch-<VERSION>) are kept and reused; a new one downloads torch with its
# CUDA libraries from PyPI (several GB, minutes).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
python=${FLASHATTN_PYTHON:-python3}
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(2.4.0 latest)
pip_quiet=(-q --disable-pip-version-check)
pytest_pin=$(grep -E '^pytest==' "$root/python/requirements-test.txt")
transformers_pin=$(grep -E '^transformers==' "$root/python/requirements-test.txt")

wheelhouse=$root/build-py/wheelhouse
rm -rf "$wheelhouse"
start=$(date +%s)
FLASHATTN_CUDA=${FLASHATTN_CUDA:-OFF} "$python" -m pip wheel "${pip_quiet[@]}" --no-deps -w "$wheelhouse" "$root"
wheel=$(ls "$wheelhouse"/flashattn-*.whl)
echo "check_wheel: built $(basename "$wheel") in $(( $(date +%s) - start )) s"

summary=("date: $(date -u +%Y-%m-%d), commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
         "wheel: $(basename "$wheel") (FLASHATTN_CUDA=${FLASHATTN_CUDA:-OFF}), $("$python" --version 2>&1)")
status=0
for version in "${versions[@]}"; do
    venv=$root/build-py/venv-torch-$version
    log=$root/build-py/wheel-torch-$version.log
    start=$(date +%s)
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    if [ "$version" = latest ]; then
        "$venv/bin/python" -m pip install "${pip_quiet[@]}" --upgrade torch
    else
        "$venv/bin/python" -m pip install "${pip_quiet[@]}" "torch==$version"
    fi
    torch_version=$("$venv/bin/python" -c 'import torch; print(torch.__version__)' 2>/dev/null)
    # transformers 5 needs torch >= 2.6 (with an older one it loads without its models, and the
    # Llama example test fails): older torch gets the last transformers 4.
    transformers=$transformers_pin
    if "$venv/bin/python" -c 'import sys, torch; sys.exit(tuple(map(int, torch.__version__.split(".")[:2])) >= (2, 6))'; then
        transformers="transformers<5"
    fi
    "$venv/bin/python" -m pip install "${pip_quiet[@]}" "$pytest_pin" "$transformers"
    "$venv/bin/python" -m pip install "${pip_quiet[@]}" --no-deps --force-reinstall "$wheel"
    # The installed package, not python/flashattn: run from the tests folder, no library override.
    result=0
    (cd "$root/tests/python" && env -u FLASHATTN_LIBRARY "$venv/bin/python" -m pytest -q -rs) > "$log" 2>&1 || result=$?
    [ "$result" = 0 ] || status=1
    line="torch $torch_version, $("$venv/bin/python" -c 'import transformers; print("transformers", transformers.__version__)' 2>/dev/null):"
    line+=" $(grep -E '(passed|failed|error)' "$log" | tail -1) (rc $result, $(( $(date +%s) - start )) s with the venv)"
    summary+=("$line")
    echo "check_wheel: $line"
done
printf '%s\n' "${summary[@]}" | tee "$root/build-py/wheel-torch-versions.txt"
exit "$status"
