// Launch template of the Hopper backward kernel for one (head dim, dtype): grid, shared memory, the
// schedule (keys as rows at d64/d128, P and dS through shared memory at d256: Sm90BwdTraitsFor) and
// the choice between the plain and the extras kernel. Compiled for sm_90a only.
#pragma once

#include "bwd_launch.h"
#include "grid_launch.h"
#include "kernels/bwd_kernel_sm90.cuh"
#include "kernels/bwd_kernel_sm90_pds.cuh"

#include <type_traits>

namespace flashattn::cuda {

template <typename Traits>
void launch_bwd_sm90(BwdArgs args, cudaStream_t stream) {
    if (args.fwd.dropout)
        fail(FA_ERROR_INTERNAL, "the sm90 backward has no dropout (backend.cu runs the mma.sync kernel for it)");
    const int64_t ctas = plan_bwd_grid(args, Traits::kHeadDim, Traits::kBlockN);
    if (ctas == 0) return;
    auto launch = [&](auto kernel) {
        launch_on_grid(kernel, ctas, Traits::kThreads, Traits::kSmemBytes, args, stream, "backward");
    };
    if constexpr (Traits::kPdSSchedule) {
        if (args.fwd.transform_scores) {
            launch(kernels::bwd_kernel_sm90_pds<Traits, true>);
        } else {
            launch(kernels::bwd_kernel_sm90_pds<Traits, false>);
        }
    } else if (args.fwd.transform_scores) {
        launch(kernels::bwd_kernel_sm90<Traits, true>);
    } else {
        launch(kernels::bwd_kernel_sm90<Traits, false>);
    }
}

template <int kHeadDim, fa_dtype kDtype>
void run_bwd_sm90(BwdArgs args, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    using Element = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;
    launch_bwd_sm90<kernels::Sm90BwdTraitsFor<kHeadDim, Element>>(args, stream);
}

} // namespace flashattn::cuda
