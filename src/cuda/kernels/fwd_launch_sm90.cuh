// Launch template of the Hopper forward kernel for one (head dim, dtype): grid, shared memory, and
// the choice between the plain and the extras kernel. Compiled for sm_90a only.
#pragma once

#include "fwd_launch.h"
#include "kernels/tile_order.cuh"
#include "kernels/fwd_kernel_sm90.cuh"

#include <cstdlib>
#include <type_traits>

namespace flashattn::cuda {

template <typename Traits>
void launch_fwd_sm90(FwdArgs args, cudaStream_t stream) {
    const int64_t ctas = plan_forward_grid<Traits>(args);
    if (ctas == 0) return;
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
