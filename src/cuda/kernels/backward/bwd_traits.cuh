// Per-head-dim tiling of the backward kernel, and the CuTe objects derived from it.
//
// Three warp grids over the same 8 warps, one per product shape:
//   S = Q K^T, dP = dO V^T     (query rows x keys)        TiledMmaSdP, warps kAtomMSdP x rest
//   dV += P^T dO, dK += dS^T Q (keys x head dim)          TiledMmaKV,  warps kAtomNKV  x rest
//   dQ = dS K                  (query rows x head dim)    TiledMmaQ,   warps kAtomMQ   x rest
// dQ is computed in kDqSlabs column slabs one after the other, each sent to the fp32 scratch before
// the next: its accumulator is alive only while dK and dV's are too (the register peak), so a slab
// of kHeadDim / kDqSlabs columns keeps that peak lower at the cost of re-reading dS per slab.
// The transposed operands (P^T, dS^T, dO^T, Q^T, K^T) are views of the same swizzled shared memory
// read with transposing ldmatrix: nothing is ever transposed in memory.
#pragma once

#include "kernels/kernel_code.h"
#include "kernels/tiles.h"

#if FLASHATTN_KERNEL_CODE
#include "device/gmem_copies.cuh"

#include <cute/tensor.hpp>
#endif
#include <cutlass/numeric_types.h>

#include <type_traits>

namespace flashattn::cuda::kernels {

using namespace cute;

template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, int kAtomMSdP_, int kAtomNKV_, int kAtomMQ_,
          int kDqSlabs_, typename Element_>
struct BwdTraits {
    using Element = Element_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockM = kBlockM_;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kWarps = kWarps_;
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kAtomMSdP = kAtomMSdP_;
    static constexpr int kAtomNKV = kAtomNKV_;
    static constexpr int kAtomMQ = kAtomMQ_;
    static constexpr int kDqSlabs = kDqSlabs_;
    static constexpr int kDqCols = kHeadDim / kDqSlabs; // dQ columns per slab

    static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>);
    static_assert(kHeadDim % 32 == 0, "head dims are multiples of the 32-column smem swizzle atom");
    static_assert(kBlockN % 64 == 0, "P and dS use the 64-column swizzle atom");
    static_assert(kWarps % kAtomMSdP == 0 && kWarps % kAtomNKV == 0 && kWarps % kAtomMQ == 0);
    // Each grid's tile (16 rows x 16 columns per warp) divides the product it computes.
    static_assert(kBlockM % (16 * kAtomMSdP) == 0 && kBlockN % (16 * (kWarps / kAtomMSdP)) == 0, "S/dP tiling");
    static_assert(kBlockN % (16 * kAtomNKV) == 0 && kHeadDim % (16 * (kWarps / kAtomNKV)) == 0, "dK/dV tiling");
    static_assert(kHeadDim % kDqSlabs == 0 && kBlockM % (16 * kAtomMQ) == 0 && kDqCols % (16 * (kWarps / kAtomMQ)) == 0,
                  "dQ tiling");

    // Shared memory (its CuTe layouts below): Q and dO twice each, K, V, P, dS; rows of 16-byte
    // chunks, swizzled in atoms of kSwizzleCols columns. A dQ slab of K^T spans whole atoms, so slab
    // s starts kKtSlabElems * s elements on (tile_to_shape stacks the atoms column block by column
    // block) at a multiple of the swizzle period.
    static constexpr int kSwizzleCols = kHeadDim % 64 == 0 ? 64 : 32;
    static constexpr int kSwizzleBits = kSwizzleCols == 64 ? 3 : 2;
    static constexpr int kSmemQElems = kBlockM * kHeadDim;   // one buffer of Q or dO (two each)
    static constexpr int kSmemKVElems = kBlockN * kHeadDim;
    static constexpr int kSmemPElems = kBlockM * kBlockN;
    static constexpr int kSmemBytes = (4 * kSmemQElems + 2 * kSmemKVElems + 2 * kSmemPElems) * int(sizeof(Element));
    static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB of shared memory");

    static_assert(kDqCols % kSwizzleCols == 0, "a dQ slab spans whole swizzle atoms");
    static constexpr int kKtSlabElems = kBlockN * kDqCols;

#if FLASHATTN_KERNEL_CODE
    using MmaOp = std::conditional_t<std::is_same_v<Element, cutlass::half_t>, SM80_16x8x16_F32F16F16F32_TN,
                                     SM80_16x8x16_F32BF16BF16F32_TN>;
    // kWarpsM x (kWarps / kWarpsM) warps; each warp covers 16 x 16 per step, so one ldmatrix.x4
    // feeds two n8 atoms of its B operand.
    template <int kWarpsM>
    using WarpGrid = TiledMMA<MMA_Atom<MmaOp>, Layout<Shape<Int<kWarpsM>, Int<kWarps / kWarpsM>, _1>>,
                              Tile<Int<16 * kWarpsM>, Int<16 * (kWarps / kWarpsM)>, _16>>;
    using TiledMmaSdP = WarpGrid<kAtomMSdP>;
    using TiledMmaKV = WarpGrid<kAtomNKV>;
    using TiledMmaQ = WarpGrid<kAtomMQ>;

    // Shared memory. Row-major tiles of 16-byte chunks, XOR-swizzled by row (as the forward).
    using SmemAtom = decltype(composition(Swizzle<kSwizzleBits, 3, 3>{},
                                          Layout<Shape<_8, Int<kSwizzleCols>>, Stride<Int<kSwizzleCols>, _1>>{}));
    using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));   // Q, dO
    using SmemLayoutKV = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));  // K, V, dK, dV
    // (head dim, rows) views of the same bytes: the B operands Q^T, dO^T (of dK, dV) and K^T (of dQ).
    using SmemLayoutQt = decltype(composition(SmemLayoutQ{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockM>>{}, GenRowMajor{})));
    using SmemLayoutKt = decltype(composition(SmemLayoutKV{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
    // The first dQ slab of K^T (head-dim columns [0, kDqCols)); slab s is the same layout
    // kKtSlabElems * s elements further on.
    using SmemLayoutKtSlab = decltype(composition(SmemLayoutKV{},
                                                  make_layout(Shape<Int<kDqCols>, Int<kBlockN>>{}, GenRowMajor{})));
    // P and dS: (query rows, keys), 16-bit; and their (keys, query rows) views, the A operands of dV, dK.
    using SmemAtomPdS = decltype(composition(Swizzle<3, 3, 3>{}, Layout<Shape<_8, _64>, Stride<_64, _1>>{}));
    using SmemLayoutPdS = decltype(tile_to_shape(SmemAtomPdS{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
    using SmemLayoutPdSt = decltype(composition(SmemLayoutPdS{},
                                                make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, GenRowMajor{})));

    // Shared -> registers: ldmatrix, transposing for the views above.
    using SmemCopy = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
    using SmemCopyT = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
    // Registers -> shared (P, dS, dK, dV): each thread holds pairs of neighbouring columns.
    using SmemCopyC = Copy_Atom<UniversalCopy<uint32_t>, Element>;

    // Global <-> shared, 16-byte chunks (gmem_copies.cuh).
    using GmemCopies = GmemTileCopies<Element, kSwizzleCols, kThreads>;
    static_assert(kBlockM % GmemCopies::kRowsPerPass == 0 && kBlockN % GmemCopies::kRowsPerPass == 0);
    using GmemLoad = typename GmemCopies::Load;
    using GmemStore = typename GmemCopies::Store;
#endif
};

// The tile of each head dim (tiles.h: the planner reads the same numbers).
template <int kHeadDim, typename Element>
using DefaultBwdTraits =
    BwdTraits<kHeadDim, tiles::backward(kHeadDim).block_m, tiles::backward(kHeadDim).block_n,
              tiles::backward(kHeadDim).warps, tiles::backward(kHeadDim).atom_m_sdp, tiles::backward(kHeadDim).atom_n_kv,
              tiles::backward(kHeadDim).atom_m_q, tiles::backward(kHeadDim).dq_slabs, Element>;

} // namespace flashattn::cuda::kernels
