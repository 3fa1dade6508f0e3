// Global <-> shared copies of a tile, shared by every kernel's traits: 16-byte chunks, one swizzle
// row (kSwizzleCols elements) per kSwizzleCols / 8 threads, the rows spread over kThreads threads;
// loads by cp.async (predicated and zero-filled by load_tile), stores as plain 16-byte stores.
#pragma once

#include <cute/tensor.hpp>

namespace flashattn::cuda::kernels {

using namespace cute;

template <typename Element, int kSwizzleCols, int kThreads>
struct GmemTileCopies {
    static constexpr int kChunkElems = 16 / int(sizeof(Element));
    static constexpr int kThreadsPerRow = kSwizzleCols / kChunkElems;
    static_assert(kThreads % kThreadsPerRow == 0);
    static constexpr int kRowsPerPass = kThreads / kThreadsPerRow; // a tile's rows must be a multiple
    using Threads = Layout<Shape<Int<kRowsPerPass>, Int<kThreadsPerRow>>, Stride<Int<kThreadsPerRow>, _1>>;
    using Load = decltype(make_tiled_copy(Copy_Atom<SM80_CP_ASYNC_CACHEGLOBAL<cute::uint128_t>, Element>{}, Threads{},
                                          Layout<Shape<_1, Int<kChunkElems>>>{}));
    using Store = decltype(make_tiled_copy(Copy_Atom<UniversalCopy<cute::uint128_t>, Element>{}, Threads{},
                                           Layout<Shape<_1, Int<kChunkElems>>>{}));
};

} // namespace flashattn::cuda::kernels
