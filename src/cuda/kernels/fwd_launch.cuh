// Launch template of the forward kernel for one (head dim, dtype): grid, shared memory, and the
// choice between the plain and the extras kernel.
#pragma once

#include "cuda_check.h"
#include "fwd_launch.h"
#include "kernels/fwd_kernel.cuh"

#include <climits>
#include <type_traits>

namespace flashattn::cuda {

template <typename Traits, bool kWithExtras>
void launch_fwd(FwdArgs args, cudaStream_t stream) {
    args.num_m_blocks = (args.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
    // One-dimensional grid: no 65535 limit on batch * heads, only 2^31 - 1 CTAs in all.
    const int64_t ctas = int64_t(args.num_m_blocks) * args.batch * args.num_heads;
    if (ctas == 0) return;
    if (ctas > INT_MAX)
        fail(FA_ERROR_UNSUPPORTED, "the CUDA forward needs ", ctas, " thread blocks (query blocks of ",
             Traits::kBlockM, " rows x batch ", args.batch, " x heads ", args.num_heads,
             "), more than the 2^31-1 a grid holds");

    auto launch = [&](auto kernel) {
        check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Traits::kSmemBytes),
                   "setting the forward kernel's shared-memory size");
        kernel<<<dim3(unsigned(ctas)), dim3(Traits::kThreads), Traits::kSmemBytes, stream>>>(args);
        check_cuda(cudaGetLastError(), "launching the forward kernel");
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
