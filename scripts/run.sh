#!/usr/bin/env bash
# The main job: set up, build, and run one real attention problem (forward + backward) with the
# fp64 reference check, on the GPU if there is one, else on the CPU. Extra arguments go to the CLI.
# Builds the command-line tool and the library only; scripts/test.sh builds the rest.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" flashattn-cli
args=(--batch 2 --seqlen 1024 --heads 16 --kv-heads 4 --head-dim 128 --dtype bf16 --causal --backward --check)
exec "$FLASHATTN_BUILD/tools/cli/flashattn-cli" "${args[@]}" "$@"
