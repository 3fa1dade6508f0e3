// Launch template of the Hopper forward kernel for one (head dim, dtype): grid, shared memory, and
// the choice between the plain and the extras kernel. Compiled for sm_90a only.
#pragma once

#include "fwd_launch.h"
#include "kernels/tile_order.cuh"
#include "kernels/fwd_kernel_sm90.cuh"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace flashattn::cuda {

// The kernel is persistent (it loops over tiles with a grid stride: one CTA per SM, or one per tile
// when there are fewer) for unmasked problems, where it measured 1-8% faster than one CTA per tile
// (the next tile's K/V arrive under the epilogue; session 5). Under a causal or local mask the
// tiles do unequal work and a grid stride hands some SMs twice the others' (d256 causal 16k: 342
// against 533 TFLOP/s per tile), so there the hardware's dynamic dispatch of one CTA per tile wins;
// except at d <= 64, where the tiles are short and persistence measured equal or faster (1k: 246
// against 214). FLASHATTN_CUDA_SM90_PERSISTENT=0 / 1 forces either (the same kernel; A/B timing)
// where the kernel is compiled persistent (Traits::kPersistent: d <= 128).
inline int64_t sm90_forward_ctas(int64_t tiles, const FwdArgs& args, int head_dim, bool compiled_persistent) {
    if (!compiled_persistent) return tiles; // Traits::kPersistent: the kernel computes one tile
    bool persistent = !(args.mask.is_local() && head_dim > 64);
    if (const char* choice = std::getenv("FLASHATTN_CUDA_SM90_PERSISTENT")) {
        if (std::strcmp(choice, "0") == 0) persistent = false;
        if (std::strcmp(choice, "1") == 0) persistent = true;
    }
    if (!persistent) return tiles;
    int device = 0, sms = 0;
    check_cuda(cudaGetDevice(&device), "querying the current device");
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "querying the SM count");
    return std::min<int64_t>(tiles, sms);
}

template <typename Traits>
void launch_fwd_sm90(FwdArgs args, cudaStream_t stream) {
    const int64_t tiles = plan_forward_grid<Traits>(args);
    if (tiles == 0) return;
    const int64_t ctas = sm90_forward_ctas(tiles, args, Traits::kHeadDim, Traits::kPersistent);
    auto launch = [&](auto kernel) {
        launch_on_grid(kernel, ctas, Traits::kCtaThreads, Traits::kSmemBytes, args, stream, "forward");
    };
    if (args.dropout || args.transform_scores) {
        launch(kernels::fwd_kernel_sm90<Traits, true>);
    } else {
        launch(kernels::fwd_kernel_sm90<Traits, false>);
    }
}

template <int kHeadDim, fa_dtype kDtype>
void run_fwd_sm90(FwdArgs args, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    using Element = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;
#ifdef FLASHATTN_CUDA_TUNING
    // Tuning builds: $FLASHATTN_CUDA_SM90_BLOCK_N picks the other block width (bf16 only).
    constexpr int kDefaultN = kernels::Sm90FwdTileConfig<kHeadDim>::kBlockN;
    constexpr int kOtherN = kDefaultN == 128 ? 64 : 32;
    if constexpr (kDtype == FA_BFLOAT16) {
        const char* choice = std::getenv("FLASHATTN_CUDA_SM90_BLOCK_N");
        if (choice && std::atoi(choice) == kOtherN)
            return launch_fwd_sm90<kernels::Sm90FwdTraits<kHeadDim, kOtherN, Element>>(args, stream);
    }
#endif
    launch_fwd_sm90<kernels::DefaultSm90FwdTraits<kHeadDim, Element>>(args, stream);
}

} // namespace flashattn::cuda
