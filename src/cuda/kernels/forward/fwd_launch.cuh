// Launch of the forward kernel for one (tile head dim, dtype): the plain kernel, or the extras
// kernel when softcap, ALiBi, dropout, a non-positive scale or learnable sinks need it.
#pragma once

#include "host/grid_launch.h"
#include "host/launch.h"
#include "kernels/forward/fwd_kernel.cuh"

#include <type_traits>

namespace flashattn::cuda {

template <int kTileDim, fa_dtype kDtype>
void run_forward_sm80(const FwdArgs& args, int64_t ctas, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    using Element = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;
    using Traits = kernels::DefaultFwdTraits<kTileDim, Element>;
    auto launch = [&](auto kernel) {
        launch_on_grid(kernel, ctas, Traits::kThreads, Traits::kSmemBytes, args, stream, "forward");
    };
    // Sinks too: their merge at the epilogue moved the plain kernel's spills (ptxas, nvcc 13), whose
    // loop is at the register limit at d128.
    if (args.dropout || args.transform_scores || args.learnable_sink) {
        launch(kernels::fwd_kernel<Traits, true>);
    } else {
        launch(kernels::fwd_kernel<Traits, false>);
    }
}

} // namespace flashattn::cuda
