// Launch template of the backward's main kernel for one (head dim, dtype): grid, shared memory,
// and the choice between the plain and the extras kernel.
#pragma once

#include "bwd_launch.h"
#include "grid_launch.h"
#include "kernels/bwd_kernel.cuh"

#include <type_traits>

namespace flashattn::cuda {

// Whether a call needs the extras kernel (dropout, softcap, ALiBi) rather than the plain one.
inline bool bwd_needs_extras(const BwdArgs& args) { return args.fwd.dropout || args.fwd.transform_scores; }

// Grid, shared memory and launch of one of the two kernels of a tiling.
template <typename Traits, bool kExtras>
void launch_bwd_kernel(BwdArgs args, cudaStream_t stream) {
    const int64_t ctas = plan_bwd_grid(args, Traits::kHeadDim, Traits::kBlockN);
    if (ctas == 0) return;
    launch_on_grid(kernels::bwd_kernel<Traits, kExtras>, ctas, Traits::kThreads, Traits::kSmemBytes, args, stream,
                   "backward");
}

template <typename Traits>
void launch_bwd(BwdArgs args, cudaStream_t stream) {
    if (bwd_needs_extras(args)) {
        launch_bwd_kernel<Traits, true>(args, stream);
    } else {
        launch_bwd_kernel<Traits, false>(args, stream);
    }
}

template <int kHeadDim, fa_dtype kDtype>
void run_bwd(BwdArgs args, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    using Element = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;
    launch_bwd<kernels::DefaultBwdTraits<kHeadDim, Element>>(args, stream);
}

} // namespace flashattn::cuda
