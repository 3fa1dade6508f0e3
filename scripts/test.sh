#!/usr/bin/env bash
# Set up, build and run the whole test suite: the C++ suite (ctest) and the Python package's tests
# (pytest, after `pip install .`). GPU tests skip with a message when there is no GPU.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/setup.sh"
status=0
(cd "$FLASHATTN_BUILD" && ctest --output-on-failure -j "$(nproc)" --timeout 900) || status=$?
bash "$here/test_python.sh" || status=$?
exit "$status"
