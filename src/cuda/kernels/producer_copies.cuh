// Global -> shared copies of a producer warpgroup (the warp-specialised Hopper kernels): every
// 16-byte chunk goes through cp.async, zero-filled (source size 0) where rows or columns lie outside
// the tensor, so that one cp.async.mbarrier.arrive per producer thread covers every byte of a stage.
// (load_tile in tile_ops.cuh zero-fills with plain shared stores, which an mbarrier does not track.)
#pragma once

#include "kernels/tile_ops.cuh"

#include <cute/tensor.hpp>

namespace flashattn::cuda::kernels {

using namespace cute;

// 16 bytes global -> shared, or 16 zero bytes when !valid (source size 0: nothing is read, but the
// address must still be a valid one, so the caller passes a safe pointer then).
__device__ __forceinline__ void cp_async_16_or_zero(void* smem, const void* gmem, bool valid) {
    const uint32_t dst = cast_smem_ptr_to_uint(smem);
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
                 "r"(valid ? 16 : 0));
}

// One tile global -> shared by the producer's threads, every 16-byte chunk through cp.async.
// rows_valid / column_ok as load_tile (tile_ops.cuh, which also walks the chunks); `safe` is any
// readable address.
template <typename Src, typename Dst, typename Coords, typename ColumnOk, typename Element>
__device__ __forceinline__ void produce_tile(Src const& src, Dst&& dst, Coords const& coords, ColumnOk const& column_ok,
                                             int rows_valid, const Element* safe) {
    for_each_tile_chunk(dst, coords, column_ok, rows_valid, [&](int m, int k, bool in_bounds) {
        cp_async_16_or_zero(raw_pointer_cast(&dst(0, m, k)), in_bounds ? &src(0, m, k) : safe, in_bounds);
    });
}

// 4 bytes global -> shared, or 4 zero bytes when !valid (the per-row lse / dsum of the backward).
__device__ __forceinline__ void cp_async_4_or_zero(void* smem, const void* gmem, bool valid) {
    const uint32_t dst = cast_smem_ptr_to_uint(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 4 : 0));
}

} // namespace flashattn::cuda::kernels
