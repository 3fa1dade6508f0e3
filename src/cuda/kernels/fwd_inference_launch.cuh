// Launch template of the forward kernel's inference variant for one (head dim, dtype, K/V load
// schedule): its own tile (InferenceTileConfig, or the split-keys decode kernel's), a grid of
// (query block, split, sequence, head or KV head when packed).
#pragma once

#include "grid_launch.h"
#include "inference_launch.h"
#include "kernels/fwd_decode_kernel.cuh"
#include "kernels/fwd_kernel.cuh"

#include <algorithm>
#include <type_traits>

namespace flashattn::cuda {

using kernels::BlockLoads;

namespace detail {
template <fa_dtype kDtype>
using ElementOf = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;

template <int kHeadDim, fa_dtype kDtype, InferenceSchedule kSchedule>
using InferenceTraits = std::conditional_t<
    splits_keys(kSchedule),
    kernels::SplitKeysDecodeTraits<kHeadDim, ElementOf<kDtype>, kSchedule == InferenceSchedule::split_keys_deep>,
    kernels::InferenceFwdTraits<kHeadDim, ElementOf<kDtype>, int(kSchedule)>>;

// The split-keys kernel a call runs: whole-block copies wherever the blocks are whole (every
// column: head_dim == kHeadDim, up to d128, where Q stays in registers), of a contiguous cache or
// of pages that hold whole blocks.
template <typename Traits>
BlockLoads split_keys_loads(const FwdArgs& args) {
    if (Traits::Warp::kHeadDim > 128 || args.head_dim != Traits::Warp::kHeadDim) return BlockLoads::predicated;
    if (!args.block_table) return BlockLoads::whole_contiguous;
    // (Left padding may start a sequence inside a block: predicated.)
    const bool whole_pages = args.page_size % Traits::kBlockN == 0 && !args.cache_leftpad;
    return whole_pages ? BlockLoads::whole_paged : BlockLoads::predicated;
}

// The kernel of a schedule: the split-keys decode kernel (of `loads`), or the forward kernel's
// inference variant.
template <typename Traits, InferenceSchedule kSchedule>
auto inference_kernel(BlockLoads loads) {
    if constexpr (splits_keys(kSchedule)) {
        if constexpr (Traits::Warp::kHeadDim <= 128) {
            if (loads == BlockLoads::whole_contiguous)
                return kernels::fwd_split_keys_kernel<Traits, BlockLoads::whole_contiguous>;
            if (loads == BlockLoads::whole_paged) return kernels::fwd_split_keys_kernel<Traits, BlockLoads::whole_paged>;
        }
        return kernels::fwd_split_keys_kernel<Traits, BlockLoads::predicated>;
    } else {
        return kernels::fwd_kernel<Traits, true, true>;
    }
}
} // namespace detail

template <int kHeadDim, fa_dtype kDtype, InferenceSchedule kSchedule>
InferenceTiling inference_tiling() {
    using Traits = detail::InferenceTraits<kHeadDim, kDtype, kSchedule>;
    // Asked once: every call of a decode loop plans with it. (The split-keys kernels of the three
    // copy kinds differ in registers only within what keeps the count: the fewest is taken.)
    static const int ctas_per_sm = [] {
        int fewest = 0;
        for (BlockLoads loads : {BlockLoads::predicated, BlockLoads::whole_contiguous, BlockLoads::whole_paged}) {
            if (!splits_keys(kSchedule) && loads != BlockLoads::predicated) break;
            const auto kernel = detail::inference_kernel<Traits, kSchedule>(loads);
            check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes),
                       "setting the inference kernel's shared-memory size");
            int ctas = 1;
            check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, Traits::kThreads, Traits::kSmemBytes),
                       "querying the inference kernel's occupancy");
            fewest = fewest == 0 ? ctas : std::min(fewest, ctas);
        }
        return fewest > 0 ? fewest : 1;
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
    BlockLoads loads = BlockLoads::predicated;
    if constexpr (splits_keys(kSchedule)) loads = detail::split_keys_loads<Traits>(args);
    launch_on_grid(detail::inference_kernel<Traits, kSchedule>(loads), ctas, Traits::kThreads, Traits::kSmemBytes, args,
                   stream, "inference forward");
}

} // namespace flashattn::cuda
