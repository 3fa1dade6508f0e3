// Launch of the split-keys decode kernel for one (tile head dim, dtype), in the copy kind the plan
// chose (DecodeLoads). Its grid: (query block, split, sequence, head or KV head when packed);
// args.num_m_blocks, num_splits and pack_gqa come from the plan.
#pragma once

#include "host/grid_launch.h"
#include "host/launch.h"
#include "kernels/decode/decode_kernel.cuh"

#include <algorithm>
#include <type_traits>

namespace flashattn::cuda {

namespace detail {
template <int kTileDim, fa_dtype kDtype>
using DecodeTraits = kernels::SplitKeysDecodeTraits<
    kTileDim, std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>>;

// The decode kernel of a copy kind (whole blocks only up to d128, where Q stays in registers).
template <typename Traits>
auto decode_kernel(DecodeLoads loads) {
    if constexpr (Traits::Warp::kHeadDim <= 128) {
        if (loads == DecodeLoads::whole_contiguous) return kernels::fwd_split_keys_kernel<Traits, kernels::BlockLoads::whole_contiguous>;
        if (loads == DecodeLoads::whole_paged) return kernels::fwd_split_keys_kernel<Traits, kernels::BlockLoads::whole_paged>;
    }
    return kernels::fwd_split_keys_kernel<Traits, kernels::BlockLoads::predicated>;
}
} // namespace detail

template <int kTileDim, fa_dtype kDtype>
void run_decode(const FwdArgs& args, int64_t ctas, DecodeLoads loads, cudaStream_t stream) {
    using Traits = detail::DecodeTraits<kTileDim, kDtype>;
    if (args.dropout) fail(FA_ERROR_INTERNAL, "the decode kernel has no dropout (the planner routes it elsewhere)");
    launch_on_grid(detail::decode_kernel<Traits>(loads), ctas, Traits::kThreads, Traits::kSmemBytes, args, stream,
                   "decode");
}

template <int kTileDim, fa_dtype kDtype>
int decode_ctas_per_sm() {
    using Traits = detail::DecodeTraits<kTileDim, kDtype>;
    // The decode kernels of the three copy kinds differ in registers only within what keeps the
    // count: the fewest is taken.
    int ctas = 0;
    for (DecodeLoads loads : {DecodeLoads::predicated, DecodeLoads::whole_contiguous, DecodeLoads::whole_paged}) {
        const int c = ctas_per_sm(detail::decode_kernel<Traits>(loads), Traits::kThreads, Traits::kSmemBytes);
        ctas = ctas == 0 ? c : std::min(ctas, c);
    }
    return ctas;
}

} // namespace flashattn::cuda
