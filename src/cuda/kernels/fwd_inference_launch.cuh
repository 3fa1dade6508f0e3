// Launch template of the forward kernel's inference variant for one (head dim, dtype, K/V load
// schedule): its own tile (InferenceTileConfig, or the split-keys decode kernel's), a grid of
// (query block, split, sequence, head or KV head when packed).
#pragma once

#include "grid_launch.h"
#include "inference_launch.h"
#include "kernels/fwd_decode_kernel.cuh"
#include "kernels/fwd_kernel.cuh"

#include <type_traits>

namespace flashattn::cuda {

namespace detail {
template <fa_dtype kDtype>
using ElementOf = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;

template <int kHeadDim, fa_dtype kDtype, InferenceSchedule kSchedule>
using InferenceTraits = std::conditional_t<
    splits_keys(kSchedule),
    kernels::SplitKeysDecodeTraits<kHeadDim, ElementOf<kDtype>, kSchedule == InferenceSchedule::split_keys_deep>,
    kernels::InferenceFwdTraits<kHeadDim, ElementOf<kDtype>, int(kSchedule)>>;

// The kernel of a schedule: the split-keys decode kernel, or the forward kernel's inference variant.
template <typename Traits, InferenceSchedule kSchedule>
constexpr auto inference_kernel() {
    if constexpr (splits_keys(kSchedule)) {
        return kernels::fwd_split_keys_kernel<Traits>;
    } else {
        return kernels::fwd_kernel<Traits, true, true>;
    }
}

template <typename Traits, InferenceSchedule kSchedule>
auto prepared_inference_kernel() {
    auto kernel = inference_kernel<Traits, kSchedule>();
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes),
               "setting the inference kernel's shared-memory size");
    return kernel;
}
} // namespace detail

template <int kHeadDim, fa_dtype kDtype, InferenceSchedule kSchedule>
InferenceTiling inference_tiling() {
    using Traits = detail::InferenceTraits<kHeadDim, kDtype, kSchedule>;
    // Asked once: every call of a decode loop plans with it.
    static const int ctas_per_sm = [] {
        int ctas = 1;
        const auto kernel = detail::prepared_inference_kernel<Traits, kSchedule>();
        check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, Traits::kThreads, Traits::kSmemBytes),
                   "querying the inference kernel's occupancy");
        return ctas > 0 ? ctas : 1;
    }();
    return InferenceTiling{Traits::kBlockM, Traits::kBlockN, ctas_per_sm};
}

template <int kHeadDim, fa_dtype kDtype, InferenceSchedule kSchedule>
void run_fwd_inference(FwdArgs args, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    using Traits = detail::InferenceTraits<kHeadDim, kDtype, kSchedule>;
    if (splits_keys(kSchedule) && args.dropout) // decode_variant routes dropout elsewhere
        fail(FA_ERROR_INTERNAL, "the split-keys decode kernel has no dropout");
    const int tile_rows = args.pack_gqa ? args.heads_per_kv_head : args.seqlen_q;
    const int grid_heads = args.pack_gqa ? args.num_heads / args.heads_per_kv_head : args.num_heads;
    args.num_m_blocks = (tile_rows + Traits::kBlockM - 1) / Traits::kBlockM;
    const int64_t ctas = int64_t(args.num_m_blocks) * args.num_splits * args.batch * grid_heads;
    if (!grid_has_work(ctas, "forward", "query blocks x splits ", args.num_splits, " x batch ", args.batch,
                       " x heads ", grid_heads))
        return;
    launch_on_grid(detail::inference_kernel<Traits, kSchedule>(), ctas, Traits::kThreads, Traits::kSmemBytes, args,
                   stream, "inference forward");
}

} // namespace flashattn::cuda
