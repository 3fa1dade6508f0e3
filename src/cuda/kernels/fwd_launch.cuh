// Launch template of the forward kernel for one (head dim, dtype): grid, shared memory, and the
// choice between the plain and the extras kernel.
#pragma once

#include "fwd_launch.h"
#include "grid_launch.h"
#include "kernels/tile_order.cuh"
#include "kernels/fwd_kernel.cuh"

#include <type_traits>

namespace flashattn::cuda {

template <typename Traits, bool kWithExtras>
void launch_fwd(FwdArgs args, cudaStream_t stream) {
    args.num_m_blocks = (args.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
    const int64_t ctas = int64_t(args.num_m_blocks) * args.batch * args.num_heads;
    args.section_heads = forward_section_heads(args, Traits::kBlockM, int(sizeof(typename Traits::Element)));
    if (!grid_has_work(ctas, "forward", "query blocks of ", Traits::kBlockM, " rows x batch ", args.batch,
                       " x heads ", args.num_heads))
        return;
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
