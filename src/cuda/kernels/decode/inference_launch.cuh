// Launches of the inference kernels for one (tile head dim, dtype): the forward kernel's inference
// variant (64-row tile, a ring of K/V stages) and the split-keys decode kernel, in the copy kind
// the plan chose (DecodeLoads). Their grid: (query block, split, sequence, head or KV head when
// packed); args.num_m_blocks, num_splits and pack_gqa come from the plan.
#pragma once

#include "host/grid_launch.h"
#include "host/launch.h"
#include "kernels/decode/decode_kernel.cuh"
#include "kernels/forward/fwd_kernel.cuh"

#include <algorithm>
#include <type_traits>

namespace flashattn::cuda {

namespace detail {
template <fa_dtype kDtype>
using ElementOf = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;

template <int kTileDim, fa_dtype kDtype>
using DecodeTraits = kernels::SplitKeysDecodeTraits<kTileDim, ElementOf<kDtype>>;
template <int kTileDim, fa_dtype kDtype>
using InferenceTraits = kernels::InferenceFwdTraits<kTileDim, ElementOf<kDtype>>;

// The decode kernel of a copy kind (whole blocks only up to d128, where Q stays in registers).
template <typename Traits>
auto decode_kernel(DecodeLoads loads) {
    if constexpr (Traits::Warp::kHeadDim <= 128) {
        if (loads == DecodeLoads::whole_contiguous) return kernels::fwd_split_keys_kernel<Traits, kernels::BlockLoads::whole_contiguous>;
        if (loads == DecodeLoads::whole_paged) return kernels::fwd_split_keys_kernel<Traits, kernels::BlockLoads::whole_paged>;
    }
    return kernels::fwd_split_keys_kernel<Traits, kernels::BlockLoads::predicated>;
}

// CTAs of `kernel` one SM holds with `smem` bytes of dynamic shared memory.
template <typename Kernel>
int ctas_per_sm(Kernel kernel, int threads, int smem) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
               "setting an inference kernel's shared-memory size");
    int ctas = 1;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, threads, smem),
               "querying an inference kernel's occupancy");
    return std::max(ctas, 1);
}
} // namespace detail

template <int kTileDim, fa_dtype kDtype>
void run_inference(const FwdArgs& args, int64_t ctas, cudaStream_t stream) {
    using Traits = detail::InferenceTraits<kTileDim, kDtype>;
    launch_on_grid(kernels::fwd_kernel<Traits, true, true>, ctas, Traits::kThreads, Traits::kSmemBytes, args, stream,
                   "inference forward");
}

template <int kTileDim, fa_dtype kDtype>
void run_decode(const FwdArgs& args, int64_t ctas, DecodeLoads loads, cudaStream_t stream) {
    using Traits = detail::DecodeTraits<kTileDim, kDtype>;
    if (args.dropout) fail(FA_ERROR_INTERNAL, "the decode kernel has no dropout (the planner routes it elsewhere)");
    launch_on_grid(detail::decode_kernel<Traits>(loads), ctas, Traits::kThreads, Traits::kSmemBytes, args, stream,
                   "decode");
}

template <int kTileDim, fa_dtype kDtype>
InferenceOccupancy inference_occupancy() {
    using Decode = detail::DecodeTraits<kTileDim, kDtype>;
    using Inference = detail::InferenceTraits<kTileDim, kDtype>;
    // The decode kernels of the three copy kinds differ in registers only within what keeps the
    // count: the fewest is taken.
    int decode = 0;
    for (DecodeLoads loads : {DecodeLoads::predicated, DecodeLoads::whole_contiguous, DecodeLoads::whole_paged}) {
        const int ctas = detail::ctas_per_sm(detail::decode_kernel<Decode>(loads), Decode::kThreads, Decode::kSmemBytes);
        decode = decode == 0 ? ctas : std::min(decode, ctas);
    }
    const int inference = detail::ctas_per_sm(kernels::fwd_kernel<Inference, true, true>, Inference::kThreads,
                                              Inference::kSmemBytes);
    return {decode, inference};
}

} // namespace flashattn::cuda
