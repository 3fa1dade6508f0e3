// Launches of the mma.sync forward kernel for one (tile head dim, dtype): the plain kernel, or the
// extras kernel when softcap, ALiBi, dropout, a non-positive scale or learnable sinks need it; and
// its inference variant (64-row tile, a ring of K/V stages; grid: query block, split, sequence,
// head or KV head when packed, from the plan's num_m_blocks, num_splits and pack_gqa).
#pragma once

#include "host/grid_launch.h"
#include "host/launch.h"
#include "kernels/forward/fwd_kernel.cuh"

#include <type_traits>

namespace flashattn::cuda {

namespace detail {
template <fa_dtype kDtype>
using ElementOf = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;
} // namespace detail

template <int kTileDim, fa_dtype kDtype>
void run_forward_sm80(const FwdArgs& args, int64_t ctas, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    using Traits = kernels::DefaultFwdTraits<kTileDim, detail::ElementOf<kDtype>>;
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

template <int kTileDim, fa_dtype kDtype>
void run_inference(const FwdArgs& args, int64_t ctas, cudaStream_t stream) {
    using Traits = kernels::InferenceFwdTraits<kTileDim, detail::ElementOf<kDtype>>;
    launch_on_grid(kernels::fwd_kernel<Traits, true, true>, ctas, Traits::kThreads, Traits::kSmemBytes, args, stream,
                   "inference forward");
}

template <int kTileDim, fa_dtype kDtype>
int inference_ctas_per_sm() {
    using Traits = kernels::InferenceFwdTraits<kTileDim, detail::ElementOf<kDtype>>;
    return ctas_per_sm(kernels::fwd_kernel<Traits, true, true>, Traits::kThreads, Traits::kSmemBytes);
}

} // namespace flashattn::cuda
