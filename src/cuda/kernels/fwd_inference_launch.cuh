// Launch template of the forward kernel's inference variant for one (head dim, dtype, K/V load
// schedule): its own tile (InferenceTileConfig, or the split-keys decode kernel's), a grid of
// (query block, split, sequence, head or KV head when packed).
#pragma once

#include "grid_launch.h"
#include "inference_launch.h"
#include "kernels/fwd_decode_kernel.cuh"
#include "kernels/fwd_kernel.cuh"

#include <algorithm>
#include <cstdlib>
#include <cstring>
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
// The most splits one cluster of the split-keys kernel can merge on the current device: 1 unless
// the device and the kernel's binary are sm_90 or newer (the merge's code exists only there), else
// the largest cluster the device can schedule with the kernel's shared memory, at most
// kMaxClusterMergeSplits.
template <typename Traits>
int max_cluster_merge_splits() {
    int device = 0, major = 0;
    check_cuda(cudaGetDevice(&device), "querying the current device");
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "querying the device");
    if (major < 9) return 1;
    const auto kernel = kernels::fwd_split_keys_kernel<Traits, BlockLoads::predicated>;
    cudaFuncAttributes attributes{};
    check_cuda(cudaFuncGetAttributes(&attributes, kernel), "querying the split-keys kernel");
    if (attributes.binaryVersion < 90) return 1;
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1),
               "allowing the split-keys kernel large clusters");
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(kMaxClusterMergeSplits);
    config.blockDim = dim3(Traits::kThreads);
    config.dynamicSmemBytes = Traits::kSmemBytes;
    int size = 0;
    if (cudaOccupancyMaxPotentialClusterSize(&size, kernel, &config) != cudaSuccess) {
        (void)cudaGetLastError(); // (not a sticky error: no clusters, then)
        return 1;
    }
    return std::clamp(size, 1, kMaxClusterMergeSplits);
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
    static const int max_cluster_splits = [] {
        if constexpr (splits_keys(kSchedule)) return detail::max_cluster_merge_splits<Traits>();
        return 1;
    }();
    return InferenceTiling{Traits::kBlockM, Traits::kBlockN, ctas_per_sm, max_cluster_splits};
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
    const char* cluster_choice = std::getenv("FLASHATTN_CUDA_DECODE_CLUSTER"); // "launch": A/B timing
    const bool cluster_launch_only = cluster_choice && std::strcmp(cluster_choice, "launch") == 0 &&
                                     splits_keys(kSchedule) && args.num_m_blocks == 1 && args.num_splits > 1 &&
                                     args.num_splits <= kMaxClusterMergeSplits;
    if (args.cluster_merge || cluster_launch_only) { // (the plan checked the kernel, the device and the grid)
        if (!splits_keys(kSchedule) || args.num_m_blocks != 1 || args.num_splits > kMaxClusterMergeSplits)
            fail(FA_ERROR_INTERNAL, "a cluster merge of ", args.num_splits, " splits planned for the wrong kernel");
        // FLASHATTN_CUDA_DECODE_CLUSTER_POLICY=spread / =balance / =default (A/B timing): where the
        // cluster's CTAs go.
        cudaClusterSchedulingPolicy policy = cudaClusterSchedulingPolicyDefault;
        if (const char* choice = std::getenv("FLASHATTN_CUDA_DECODE_CLUSTER_POLICY")) {
            if (std::strcmp(choice, "spread") == 0) policy = cudaClusterSchedulingPolicySpread;
            if (std::strcmp(choice, "balance") == 0) policy = cudaClusterSchedulingPolicyLoadBalancing;
        }
        // FLASHATTN_CUDA_DECODE_CLUSTER_SMEM=N (A/B timing): N bytes of shared memory per CTA instead
        // (at least the kernel's), e.g. enough that one SM holds one CTA.
        int smem = Traits::kSmemBytes;
        if (const char* bytes = std::getenv("FLASHATTN_CUDA_DECODE_CLUSTER_SMEM"))
            smem = std::clamp(std::atoi(bytes), smem, 227 * 1024);
        launch_on_grid_in_clusters(detail::inference_kernel<Traits, kSchedule>(loads), ctas, args.num_splits, policy,
                                   Traits::kThreads, smem, args, stream, "split-keys decode");
        return;
    }
    launch_on_grid(detail::inference_kernel<Traits, kSchedule>(loads), ctas, Traits::kThreads, Traits::kSmemBytes, args,
                   stream, "inference forward");
}

} // namespace flashattn::cuda
