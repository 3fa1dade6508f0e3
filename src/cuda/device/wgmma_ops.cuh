// wgmma (sm_90a warpgroup MMA) helpers of the Hopper kernels: the accumulator seen as a (rows,
// columns) matrix or transposed (the backward computes keys x queries products and hands them to
// policies written for queries x keys), the accumulator reused as a register A operand, and one
// issue of a whole-tile product.
#pragma once

#include <cute/arch/mma_sm90_gmma.hpp>
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>

#include <type_traits>

namespace flashattn::cuda::kernels {

using namespace cute;

// A wgmma m64nN accumulator fragment ((2 columns, 2 rows, N/8 column groups), MMA_M, MMA_N) seen
// as (rows, columns). Thread (warp w, lane 4g + t) holds rows 16w + g + 8r and columns
// 8j + 2t + c: in the column mode c runs fastest, so (c, c + 1) with c even are neighbours.
template <typename Layout>
__host__ __device__ __forceinline__ constexpr auto wgmma_rows_cols(Layout layout) {
    static_assert(decltype(rank(layout))::value == 3);
    static_assert(decltype(rank<0>(layout))::value == 3);
    return make_layout(make_layout(get<0, 1>(layout), get<1>(layout)),
                       make_layout(get<0, 0>(layout), get<0, 2>(layout), get<2>(layout)));
}

// A (rows, columns) layout with its two modes swapped.
template <typename Layout>
__host__ __device__ __forceinline__ constexpr auto transposed(Layout layout) {
    return make_layout(get<1>(layout), get<0>(layout));
}

// Coordinates of a (kRows, kCols) tile that read (column, row): the identity tensor of the
// transposed tile. Partitioned like the keys x queries accumulators, it yields (query, key).
template <int kRows, int kCols>
__host__ __device__ __forceinline__ auto transposed_identity_tensor() {
    return make_coord_tensor(make_layout(Shape<Int<kRows>, Int<kCols>>{}, make_stride(E<1>{}, E<0>{})));
}

// The S accumulator (16-bit after conversion) as the register A operand of P V: an A fragment of
// wgmma k16 holds, per thread, the values of two neighbouring n8 accumulator groups, in the same
// (column pair, row half) order, so P never leaves registers.
template <typename Layout>
__host__ __device__ __forceinline__ constexpr auto wgmma_accumulator_as_a_operand(Layout layout) {
    static_assert(decltype(size<0, 2>(layout))::value % 2 == 0);
    auto split = logical_divide(get<0>(layout), Shape<Underscore, Underscore, _2>{}); // (2, 2, (2, N/16))
    return make_layout(make_layout(get<0>(split), get<1>(split), get<2, 0>(split)), get<1>(layout),
                       make_layout(get<2, 1>(split), get<2>(layout)));
}

// Issues acc (=|+=) A B over the whole k extent as one wgmma batch and commits it; the caller
// waits with warpgroup_wait<N>(). kZeroInit overwrites acc (no clear() pass over the registers).
// A is a tensor of shared-memory descriptors (SS) or of registers (RS); B always descriptors.
// zero_init: the same at run time (wgmma's scale-d is a predicate operand), for a product that
// starts its accumulator only sometimes. kSteps > 0: only the first kSteps k-steps (a product whose
// A operand is zero past them).
template <bool kZeroInit, int kSteps = 0, typename TiledMma, typename FragA, typename FragB, typename Acc>
__device__ __forceinline__ void wgmma_issue(TiledMma& mma, FragA& a, FragB const& b, Acc& acc,
                                            bool zero_init = false) {
    constexpr bool kRegisterA = !std::is_same_v<typename FragA::iterator, GMMA::DescriptorIterator>;
    if constexpr (kRegisterA) warpgroup_fence_operand(a);
    warpgroup_fence_operand(acc);
    warpgroup_arrive();
    if (kZeroInit || zero_init) mma.accumulate_ = GMMA::ScaleOut::Zero;
    CUTE_UNROLL
    for (int k = 0; k < (kSteps > 0 ? kSteps : int(size<2>(a))); ++k) {
        cute::gemm(mma, a(_, _, k), b(_, _, k), acc);
        mma.accumulate_ = GMMA::ScaleOut::One;
    }
    warpgroup_commit_batch();
    warpgroup_fence_operand(acc);
    if constexpr (kRegisterA) warpgroup_fence_operand(a);
}

} // namespace flashattn::cuda::kernels
