// Launch of the backward's main kernel for one (tile head dim, dtype): the plain kernel, or the
// extras kernel when softcap, ALiBi or dropout needs it.
#pragma once

#include "host/grid_launch.h"
#include "host/launch.h"
#include "kernels/backward/bwd_kernel.cuh"

#include <type_traits>

namespace flashattn::cuda {

template <int kTileDim, fa_dtype kDtype>
void run_backward_sm80(const BwdArgs& args, int64_t ctas, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    using Element = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;
    using Traits = kernels::DefaultBwdTraits<kTileDim, Element>;
    auto launch = [&](auto kernel) {
        launch_on_grid(kernel, ctas, Traits::kThreads, Traits::kSmemBytes, args, stream, "backward");
    };
    if (args.fwd.dropout || args.fwd.transform_scores) {
        launch(kernels::bwd_kernel<Traits, true>);
    } else {
        launch(kernels::bwd_kernel<Traits, false>);
    }
}

} // namespace flashattn::cuda
