// Launch of the Hopper forward kernel for one (tile head dim, dtype): the plain or the extras
// kernel, in the form the plan chose (ForwardPlan::sm90_persistent_form: the looping form, compiled
// up to d128, where the extras kernel has only that form). Compiled for sm_90a only.
#pragma once

#include "host/grid_launch.h"
#include "host/launch.h"
#include "kernels/forward_sm90/fwd_kernel_sm90.cuh"

#include <type_traits>

namespace flashattn::cuda {

template <int kTileDim, fa_dtype kDtype>
void run_forward_sm90(const FwdArgs& args, int64_t ctas, bool persistent_form, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    using Element = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;
    using Traits = kernels::DefaultSm90FwdTraits<kTileDim, Element>;
    const bool extras = args.dropout || args.transform_scores;
    auto launch = [&](auto kernel) {
        launch_on_grid(kernel, ctas, Traits::kCtaThreads, Traits::kSmemBytes, args, stream, "forward");
    };
    if constexpr (Traits::kCanPersist) {
        if (extras) return launch(kernels::fwd_kernel_sm90<Traits, true, true>);
        if (persistent_form) return launch(kernels::fwd_kernel_sm90<Traits, false, true>);
        return launch(kernels::fwd_kernel_sm90<Traits, false, false>);
    } else {
        (void)persistent_form;
        if (extras) return launch(kernels::fwd_kernel_sm90<Traits, true, false>);
        return launch(kernels::fwd_kernel_sm90<Traits, false, false>);
    }
}

} // namespace flashattn::cuda
