#!/usr/bin/env bash
# Install what the build needs (Debian packages; CUTLASS headers from PyPI when CUDA is built) and
# configure + build. Sourced by run.sh and test.sh; safe to run repeatedly.
#   FLASHATTN_BUILD_DIR   build folder (default: build, or build-cuda when CUDA is built)
#   FLASHATTN_CUDA        ON / OFF / AUTO (default AUTO: ON when nvcc and a GPU are present;
#                         on a machine with nvcc but no GPU: compile-check one head dim, see below)
#   FLASHATTN_HEADDIMS    CUDA head dims to build (default: all when a GPU is present)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v g++ >/dev/null || need_apt+=(g++)
[ -f /usr/include/gtest/gtest.h ] || need_apt+=(libgtest-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: installing ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

has_gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then has_gpu=1; fi
cuda=${FLASHATTN_CUDA:-AUTO}
headdims=${FLASHATTN_HEADDIMS:-}
if [ "$cuda" = AUTO ]; then
    if command -v nvcc >/dev/null; then
        cuda=ON
        # Without a GPU the CUDA sources are only compile-checked: one head dim keeps it quick.
        [ "$has_gpu" = 1 ] || headdims=${headdims:-128}
    else
        cuda=OFF
    fi
fi
build=${FLASHATTN_BUILD_DIR:-$root/build}
cuda_args=(-DFLASHATTN_CUDA="$cuda")
if [ "$cuda" = ON ]; then
    "$root/scripts/fetch_cutlass.sh"
    [ -n "$headdims" ] && cuda_args+=(-DFLASHATTN_HEADDIMS="$headdims")
    [ "$has_gpu" = 1 ] || cuda_args+=(-DFLASHATTN_CUDA_ARCHS=90)
fi
echo "setup: configuring $build (CUDA $cuda${headdims:+, head dims $headdims}, GPU present: $has_gpu)"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" >/dev/null
start=$(date +%s)
cmake --build "$build" -j "$(nproc)"
echo "setup: build took $(( $(date +%s) - start )) s"
export FLASHATTN_BUILD="$build" FLASHATTN_HAS_GPU="$has_gpu"
