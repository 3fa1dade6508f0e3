#!/usr/bin/env bash
# Set up, build and run the whole test suite (GPU tests skip with a message when there is no GPU).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$FLASHATTN_BUILD"
ctest --output-on-failure -j "$(nproc)" --timeout 900
