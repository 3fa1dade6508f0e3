#!/bin/bash
# Builds bench/fa3/fa3_shim.cu with FlashAttention-3's Hopper instances into one shared library, for
# the benchmarks' optional FlashAttention-3 column (bench/gpu_forward.py / gpu_backward.py --fa3 SO).
#   bash bench/fa3/build.sh HOPPER_DIR OUT.so [HDIMS] [PARTS]
# HOPPER_DIR: the hopper/ folder of a FlashAttention-3 checkout (FlashAttention-3 is not a
# dependency of the project: get it yourself). HDIMS: head dims, default "64 128 256". PARTS: "fwd",
# "bwd" or both (the default). A forward instance takes ~2 minutes of one core, a backward (causal or
# not, MHA or GQA, deterministic or not: 8 kernels) far more; objects compile $(nproc) at a time.
# Uses the project's pinned CUTLASS (scripts/fetch_cutlass.sh) and only the features the benchmarks
# need: bf16, sm_90a, dense inputs, causal or not; no split, paging, softcap, local window, varlen,
# packed GQA, fp8 or fp16.
set -euo pipefail
hopper=$(cd "$1" && pwd); out=$2; hdims=${3:-64 128 256}; parts=${4:-fwd bwd}
root=$(cd "$(dirname "$0")/../.." && pwd)
bash "$root/scripts/fetch_cutlass.sh" >/dev/null
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
flags=(-O3 -std=c++17 --use_fast_math -lineinfo -Xcompiler -fPIC -gencode arch=compute_90a,code=sm_90a
       -DNDEBUG -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED -DCUTLASS_ENABLE_GDC_FOR_SM90 -DCUTLASS_DEBUG_TRACE_LEVEL=0
       --expt-relaxed-constexpr --expt-extended-lambda
       -I"$hopper" -I"$root/third_party/cutlass/include" -I"$(dirname "$(command -v nvcc)")/../include/cccl")
for f in SPLIT PAGEDKV APPENDKV LOCAL SOFTCAP PACKGQA FP16 FP8 VARLEN SM8x HDIMDIFF64 HDIMDIFF192; do
    flags+=(-DFLASHATTENTION_DISABLE_$f)
done
sources=()
for d in $hdims; do
    flags+=(-DFA3_SHIM_HDIM$d)
    for part in $parts; do sources+=("$hopper/instantiations/flash_${part}_hdim${d}_bf16_sm90.cu"); done
done
[[ " $parts " == *" bwd "* ]] && flags+=(-DFA3_SHIM_BACKWARD)
sources+=("$root/bench/fa3/fa3_shim.cu")
printf '%s\n' "${sources[@]}" | xargs -P "$(nproc)" -I{} sh -c \
    'echo "compiling $(basename {})" >&2; nvcc "$@" -c {} -o "'"$work"'/$(basename {} .cu).o"' _ "${flags[@]}"
nvcc -shared -o "$out" "$work"/*.o -lcuda
echo "wrote $out" >&2
