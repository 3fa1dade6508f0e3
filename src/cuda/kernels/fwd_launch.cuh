// Launch template of the forward kernel for one (head dim, dtype): grid, shared memory, and the
// choice between the plain and the extras kernel.
#pragma once

#include "fwd_launch.h"
#include "kernels/tile_order.cuh"
#include "kernels/fwd_kernel.cuh"

#include <type_traits>

namespace flashattn::cuda {

template <typename Traits, bool kWithExtras>
void launch_fwd(FwdArgs args, cudaStream_t stream) {
    const int64_t ctas = plan_forward_grid<Traits>(args);
    if (ctas == 0) return;
    auto launch = [&](auto kernel) {
        launch_on_grid(kernel, ctas, Traits::kThreads, Traits::kSmemBytes, args, stream, "forward");
    };
    if (args.dropout || args.transform_scores) {
        if constexpr (kWithExtras) {
            launch(kernels::fwd_kernel<Traits, true>);
        } else {
            fail(FA_ERROR_UNSUPPORTED, "this forward tile variant has no softcap/ALiBi/dropout kernel");
        }
    } else {
        launch(kernels::fwd_kernel<Traits, false>);
    }
}

template <int kHeadDim, fa_dtype kDtype>
void run_fwd(FwdArgs args, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    using Element = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;
    launch_fwd<kernels::DefaultFwdTraits<kHeadDim, Element>>(args, stream);
}

} // namespace flashattn::cuda
