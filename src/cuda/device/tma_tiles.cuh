// TMA copies of a tile in shared memory laid out as wgmma's K-major swizzled atoms (tile_to_shape
// of a 128- or 64-byte-row atom): column blocks of kBoxCols columns, each block's rows contiguous,
// kBlockRows rows apart. A map from host/tensor_maps.h (encode_rows_map) with boxes of kBoxCols
// columns moves one column block per copy, the swizzle computed by the hardware from the shared
// address; rows and columns outside the map are zero-filled on a load and dropped on a store.
#pragma once

#include <cute/arch/copy_sm90_tma.hpp>

#include <cstdint>

namespace flashattn::cuda::kernels {

// The kCols columns of rows [row0, row0 + box rows) of (head, batch) into `tile`, the bytes counted
// on `barrier` (whose expected transaction bytes the caller announced).
template <int kBlockRows, int kCols, int kBoxCols, typename Element>
__device__ __forceinline__ void tma_load_tile(const void* map, uint64_t* barrier, Element* tile, int row0, int head,
                                              int batch) {
    static_assert(kCols % kBoxCols == 0, "whole column blocks");
    CUTE_UNROLL
    for (int c = 0; c < kCols / kBoxCols; ++c)
        cute::SM90_TMA_LOAD_4D::copy(map, barrier, uint64_t(cute::TMA::CacheHintSm90::EVICT_NORMAL),
                                     tile + c * kBlockRows * kBoxCols, c * kBoxCols, row0, head, batch);
}

// The same rows from `tile` to global memory; the caller commits them (tma_store_arrive) and waits.
template <int kBlockRows, int kCols, int kBoxCols, typename Element>
__device__ __forceinline__ void tma_store_tile(const void* map, const Element* tile, int row0, int head, int batch) {
    static_assert(kCols % kBoxCols == 0, "whole column blocks");
    CUTE_UNROLL
    for (int c = 0; c < kCols / kBoxCols; ++c)
        cute::SM90_TMA_STORE_4D::copy(map, tile + c * kBlockRows * kBoxCols, c * kBoxCols, row0, head, batch);
}

} // namespace flashattn::cuda::kernels
