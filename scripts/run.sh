#!/usr/bin/env bash
# The main job: set up, build, and run one real attention problem (forward + backward) with the
# fp64 reference check, on the GPU if there is one, else on the CPU. Extra arguments go to the CLI.
# Builds the command-line tool and the library only; scripts/test.sh builds the rest. With a GPU it
# builds the main job's head dim (128) for that GPU's architecture first, so the first answer comes
# within minutes; FLASHATTN_HEADDIMS / FLASHATTN_CUDA_ARCHS choose otherwise (scripts/setup.sh), and
# scripts/test.sh builds every head dim for both architectures.
set -euo pipefail
if command -v nvidia-smi >/dev/null && cap=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1); then
    case "$cap" in
        8.*) export FLASHATTN_CUDA_ARCHS=${FLASHATTN_CUDA_ARCHS:-80} FLASHATTN_HEADDIMS=${FLASHATTN_HEADDIMS:-128} ;;
        9.0) export FLASHATTN_CUDA_ARCHS=${FLASHATTN_CUDA_ARCHS:-90} FLASHATTN_HEADDIMS=${FLASHATTN_HEADDIMS:-128} ;;
    esac
fi
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh" flashattn-cli
args=(--batch 2 --seqlen 1024 --heads 16 --kv-heads 4 --head-dim 128 --dtype bf16 --causal --backward --check)
exec "$FLASHATTN_BUILD/tools/cli/flashattn-cli" "${args[@]}" "$@"
