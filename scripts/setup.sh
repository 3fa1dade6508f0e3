#!/usr/bin/env bash
# Install what the build needs (Debian packages; CUTLASS headers from PyPI when CUDA is built) and
# configure + build. Sourced by run.sh and test.sh, with the targets to build as arguments (default:
# all); safe to run repeatedly. Its first line says which backends it builds, why, and how to
# choose otherwise.
#   FLASHATTN_BUILD_DIR   build folder (default: build)
#   FLASHATTN_CUDA        ON / OFF / AUTO (default AUTO: the CUDA backend where it can run, i.e.
#                         nvcc found and a GPU visible; as CMake's AUTO and `pip install .` decide).
#                         ON without a GPU compiles one head dim for sm_90: a compile check
#   FLASHATTN_HEADDIMS    CUDA head dims to build (default: all with a GPU, 128 without)
#   FLASHATTN_CUDA_ARCHS  CUDA architectures (default: 80;90 with a GPU, 90 without)
# GoogleTest is installed (and the C++ suites configured) only when the targets need them (all).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(all)

has_gpu=0
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then has_gpu=1; fi
has_nvcc=0
if command -v nvcc >/dev/null; then has_nvcc=1; fi
cuda=${FLASHATTN_CUDA:-AUTO}
case "$cuda" in
    AUTO)
        if [ "$has_nvcc" = 1 ] && [ "$has_gpu" = 1 ]; then
            cuda=ON why="nvcc and a GPU found" other="FLASHATTN_CUDA=OFF builds the CPU backend alone"
        elif [ "$has_nvcc" = 1 ]; then
            cuda=OFF why="nvcc found but no GPU visible (nvidia-smi -L), so CUDA code could not run here"
            other="FLASHATTN_CUDA=ON adds the CUDA backend as a compile check (scripts/test.sh does that)"
        else
            cuda=OFF why="no nvcc found" other="FLASHATTN_CUDA=ON adds the CUDA backend once the CUDA toolkit is installed"
        fi ;;
    ON) why="FLASHATTN_CUDA=ON" other="FLASHATTN_CUDA=OFF builds the CPU backend alone" ;;
    OFF) why="FLASHATTN_CUDA=OFF" other="FLASHATTN_CUDA=ON adds the CUDA backend" ;;
    *) echo "setup: FLASHATTN_CUDA must be ON, OFF or AUTO, not '$cuda'" >&2; exit 2 ;;
esac
if [ "$cuda" = ON ]; then
    echo "setup: building the CPU and CUDA backends: $why. $other."
else
    echo "setup: building the CPU backend only: $why. $other."
fi

wants_tests=0
for t in "${targets[@]}"; do [ "$t" = all ] && wants_tests=1; done
has_gtest=0
[ -f /usr/include/gtest/gtest.h ] && has_gtest=1

need_apt=()
command -v cmake >/dev/null || need_apt+=(cmake)
command -v ninja >/dev/null || need_apt+=(ninja-build)
command -v g++ >/dev/null || need_apt+=(g++)
if [ "$wants_tests" = 1 ] && [ "$has_gtest" = 0 ]; then need_apt+=(libgtest-dev); has_gtest=1; fi
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "setup: installing ${need_apt[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi

build=${FLASHATTN_BUILD_DIR:-$root/build}
headdims=${FLASHATTN_HEADDIMS:-}
archs=${FLASHATTN_CUDA_ARCHS:-}
# Each configure states the head dims and architectures (or resets them to CMake's defaults, all of
# them), so that a build folder configured narrowly once is not narrow for ever.
cuda_args=(-DFLASHATTN_CUDA="$cuda")
if [ "$cuda" = ON ]; then
    "$root/scripts/fetch_cutlass.sh"
    # Without a GPU the CUDA sources are only compile-checked: one head dim, one architecture.
    [ "$has_gpu" = 1 ] || { headdims=${headdims:-128}; archs=${archs:-90}; }
fi
if [ -n "$headdims" ]; then cuda_args+=(-DFLASHATTN_HEADDIMS="$headdims"); else cuda_args+=(-UFLASHATTN_HEADDIMS); fi
if [ -n "$archs" ]; then cuda_args+=(-DFLASHATTN_CUDA_ARCHS="$archs"); else cuda_args+=(-UFLASHATTN_CUDA_ARCHS); fi
tests=OFF
[ "$has_gtest" = 1 ] && tests=ON
echo "setup: configuring $build (CUDA $cuda${headdims:+, head dims $headdims}${archs:+, archs $archs}; C++ tests $tests), building ${targets[*]}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda_args[@]}" -DFLASHATTN_BUILD_TESTS="$tests" >/dev/null
start=$(date +%s)
cmake --build "$build" -j "$(nproc)" --target "${targets[@]}"
echo "setup: build took $(( $(date +%s) - start )) s"
export FLASHATTN_BUILD="$build" FLASHATTN_HAS_GPU="$has_gpu" FLASHATTN_HAS_NVCC="$has_nvcc" FLASHATTN_CUDA_BUILT="$cuda"
