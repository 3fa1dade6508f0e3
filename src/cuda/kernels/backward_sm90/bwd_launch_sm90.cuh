// Launch of the Hopper backward kernel for one (tile head dim, dtype): the schedule of the head dim
// (keys as rows at d64/d128, P and dS through shared memory at d256: Sm90BwdTraitsFor) and the
// plain or the extras (softcap, ALiBi) kernel. No dropout (the planner routes it to the mma.sync
// kernel). Compiled for sm_90a only.
#pragma once

#include "host/grid_launch.h"
#include "host/launch.h"
#include "kernels/backward_sm90/bwd_kernel_sm90.cuh"
#include "kernels/backward_sm90/bwd_kernel_sm90_pds.cuh"
#include "kernels/backward_sm90/bwd_params_sm90.cuh"

#include <type_traits>

namespace flashattn::cuda {

template <int kTileDim, fa_dtype kDtype>
void run_backward_sm90(const BwdArgs& args, int64_t ctas, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    using Element = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;
    using Traits = kernels::Sm90BwdTraitsFor<kTileDim, Element>;
    if (args.fwd.dropout) fail(FA_ERROR_INTERNAL, "the sm90 backward has no dropout (the planner routes it elsewhere)");
    const Sm90BwdParams params = sm90_backward_params<Traits>(args, kDtype == FA_BFLOAT16);
    auto launch = [&](auto kernel) {
        launch_on_grid(kernel, ctas, Traits::kThreads, Traits::kSmemBytes, params, stream, "backward");
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

} // namespace flashattn::cuda
