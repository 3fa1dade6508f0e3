// Launch of the Hopper forward kernel for one (tile head dim, dtype, value tile head dim): the plain
// or the extras kernel, in the looping form where O's accumulator is at most 64 x 128
// (Sm90FwdTraits::kCanPersist; ForwardPlan::sm90_persistent sizes its grid), else the one-tile form.
// Compiled for sm_90a only.
#pragma once

#include "host/grid_launch.h"
#include "host/launch.h"
#include "kernels/forward_sm90/fwd_kernel_sm90.cuh"
#include "kernels/forward_sm90/kv_tensor_maps.cuh"

#include <type_traits>

namespace flashattn::cuda {

template <int kTileDim, fa_dtype kDtype, int kTileDimV>
void run_forward_sm90(const FwdArgs& args, int64_t ctas, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    static_assert(kTileDimV == kTileDim || kTileDimV == tiles::forward_sm90_value_dim(kTileDim));
    using Element = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;
    using Traits = kernels::DefaultSm90FwdTraits<kTileDim, Element, kTileDimV>;
    constexpr bool kPersistent = Traits::kCanPersist;
    const Sm90FwdParams params = sm90_forward_params<Traits>(args, kDtype == FA_BFLOAT16);
    // A tile counter was cleared by the kernel just before (clear_for_dependent): launched as its
    // programmatic dependent, the kernel waits for it only at its first claim.
    const bool after_clear = args.tile_counter != nullptr;
    auto launch = [&](auto kernel) {
        launch_on_grid(kernel, ctas, Traits::kCtaThreads, Traits::kSmemBytes, params, stream, "forward", after_clear);
    };
    if (args.dropout || args.transform_scores) return launch(kernels::fwd_kernel_sm90<Traits, true, kPersistent>);
    return launch(kernels::fwd_kernel_sm90<Traits, false, kPersistent>);
}

} // namespace flashattn::cuda
