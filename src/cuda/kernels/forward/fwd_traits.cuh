// Per-head-dim tiling of the forward kernel, and the CuTe objects derived from it.
//
// A FwdTraits instance answers every "how is the data laid out and moved" question, so the kernel
// body only says what happens, never how many threads touch which bytes.
#pragma once

#include "kernels/kernel_code.h"
#include "kernels/tiles.h"
#if FLASHATTN_KERNEL_CODE
#include "device/gmem_copies.cuh"
#include "device/producer_copies.cuh"

#include <cute/tensor.hpp>
#endif
#include <cutlass/numeric_types.h>

#include <type_traits>

namespace flashattn::cuda::kernels {

using namespace cute;

// kKvStages: how K/V blocks reach shared memory (fwd_kernel.cuh, "Loads").
//   1: one K and one V buffer; K[n-1] loads during P V[n], V[n] during Q K[n]^T. The plain kernel,
//      whose tiles are compute-bound, needs nothing deeper.
//   >= 2: a ring of kKvStages (K, V) block pairs; block n - (kKvStages - 1) is fetched while block n
//      is computed, so a CTA keeps up to kKvStages - 1 blocks in flight. The inference variant,
//      bound by reading the KV cache, needs that depth to keep enough bytes in flight for HBM.
template <int kHeadDim_, int kBlockM_, int kBlockN_, int kWarps_, typename Element_, int kKvStages_ = 1>
struct FwdTraits {
    using Element = Element_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kBlockM = kBlockM_;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kWarps = kWarps_;
    static constexpr int kThreads = kWarps * 32;
    static constexpr int kKvStages = kKvStages_;
    static_assert(kKvStages >= 1);

    static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>);
    static_assert(kBlockM % (16 * kWarps) == 0, "each warp owns a whole number of 16-row MMA tiles");
    static_assert(kBlockN % 16 == 0, "P feeds P.V as 16-wide k slices");
    static_assert(kHeadDim % 32 == 0, "head dims are multiples of the 32-column smem swizzle atom");

    // Shared memory: rows of 64 (or 32) elements, 16-byte chunks XOR-swizzled by row so that both
    // the row-wise cp.async writes and the column-wise ldmatrix reads hit 8 different bank groups.
    static constexpr int kSwizzleCols = kHeadDim % 64 == 0 ? 64 : 32;
    static constexpr int kSwizzleBits = kSwizzleCols == 64 ? 3 : 2;
    static constexpr int kSmemQElems = kBlockM * kHeadDim;
    static constexpr int kSmemKVElems = kBlockN * kHeadDim;
    static constexpr int kSmemBytes = (kSmemQElems + 2 * kKvStages * kSmemKVElems) * int(sizeof(Element));
    static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB of shared memory");

#if FLASHATTN_KERNEL_CODE
    // Tensor cores: one m16n8k16 mma.sync per atom (fp32 accumulate); warps along M only. The
    // N extent 16 lets one ldmatrix.x4 feed two n8 atoms.
    using MmaOp = std::conditional_t<std::is_same_v<Element, cutlass::half_t>, SM80_16x8x16_F32F16F16F32_TN,
                                     SM80_16x8x16_F32BF16BF16F32_TN>;
    using TiledMma = TiledMMA<MMA_Atom<MmaOp>, Layout<Shape<Int<kWarps>, _1, _1>>, Tile<Int<16 * kWarps>, _16, _16>>;

    // The shared-memory layouts (swizzled as said above).
    using SmemAtom = decltype(composition(Swizzle<kSwizzleBits, 3, 3>{},
                                          Layout<Shape<_8, Int<kSwizzleCols>>, Stride<Int<kSwizzleCols>, _1>>{}));
    using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    using SmemLayoutKV = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    // V read as V^T (head_dim x keys) for the B operand of P.V: same bytes, transposed view.
    using SmemLayoutVt = decltype(composition(SmemLayoutKV{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
    using SmemLayoutO = SmemLayoutQ; // O is staged in Q's buffer

    // Shared -> registers: ldmatrix (transposing for V).
    using SmemCopyQK = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
    using SmemCopyVt = Copy_Atom<SM75_U16x8_LDSM_T, Element>;
    // Registers -> shared for O: each thread holds pairs of neighbouring columns.
    using SmemCopyO = Copy_Atom<UniversalCopy<uint32_t>, Element>;

    // Global <-> shared, 16-byte chunks (gmem_copies.cuh).
    using GmemCopies = GmemTileCopies<Element, kSwizzleCols, kThreads>;
    static_assert(kBlockM % GmemCopies::kRowsPerPass == 0 && kBlockN % GmemCopies::kRowsPerPass == 0);
    using GmemLoad = typename GmemCopies::Load;
    using GmemStore = typename GmemCopies::Store;
#endif
};

// The inference variant (paged K/V, KV cache, split-KV, packed GQA heads; tiles.h): 64 query
// rows, so the wasted MMA rows of short query tiles cost less, long K/V blocks, a ring of stages.
template <int kHeadDim, typename Element>
using InferenceFwdTraits = FwdTraits<kHeadDim, tiles::inference(kHeadDim).block_m, tiles::inference(kHeadDim).block_n,
                                     tiles::inference(kHeadDim).warps, Element, tiles::inference(kHeadDim).kv_stages>;

// The split-keys decode tile (decode/decode_kernel.cuh; tiles.h): kWarps warps share one 16-row
// query tile, and each streams its own K/V blocks (the CTA's blocks n_end - 1 - warp, n_end - 1 -
// warp - kWarps, ...) through its own ring of kKvStages stages, with its own online softmax; the
// warps' partial results are merged through shared memory at the end. No CTA-wide barrier in the
// main loop, so each warp (one per SM sub-partition) keeps its own loads in flight. Blocks of 16
// keys (32 at d <= 64, where 64 keys at d32 spilled): a ring stage of K and V is 8 KB at d64 and
// d128; as many stages (at least 3) as leave room for two CTAs per SM: d128 3 stages, 100 KB, 8
// warps and 16 blocks in flight per SM (a deeper ring, one CTA per SM, read a saturated HBM no
// better: docs/perf-log.md).
// The split-keys kernel's traits: Warp answers every question about one warp's tile (16 query rows,
// its MMA, its copies, the layout of one ring stage), as the narrow tile's FwdTraits with one warp;
// the CTA adds the warp count, the shared-memory plan and the merge's scratch.
template <int kHeadDim, typename Element>
struct SplitKeysDecodeTraits {
    static constexpr tiles::Decode kTile = tiles::decode(kHeadDim);
    using Warp = FwdTraits<kHeadDim, kTile.block_m, kTile.block_n, 1, Element, kTile.kv_stages>;
    static constexpr int kWarps = kTile.warps;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kBlockM = Warp::kBlockM;
    static constexpr int kBlockN = Warp::kBlockN;
    static constexpr int kKvStages = Warp::kKvStages;
#if FLASHATTN_KERNEL_CODE
    // A warp's K/V block copy: base addresses plus constants, unpredicated for whole blocks.
    using KvCopy = SwizzledTileCopy<Element, typename Warp::SmemLayoutKV, 32, Warp::kSwizzleCols>;
#endif

    // Shared memory: Q (one copy, all warps read it), then each warp's ring: kKvStages K blocks, then
    // kKvStages V blocks. Every piece is a multiple of the 8-row swizzle period.
    static constexpr int kWarpRingElems = 2 * kKvStages * Warp::kSmemKVElems;
    static constexpr int kSmemElems = Warp::kSmemQElems + kWarps * kWarpRingElems;
    // The merge overlays the rings once every warp is done: each warp's lse per row, then its O rows
    // in fp32, rows padded by 8 floats so that the quads of a half-warp hit different banks.
    static constexpr int kMergeRowFloats = kHeadDim + 8;
    static constexpr int kMergeFloats = kWarps * kBlockM + kWarps * kBlockM * kMergeRowFloats;
    static_assert(kMergeFloats * 4 <= kWarps * kWarpRingElems * int(sizeof(Element)),
                  "the merge scratch fits in the rings it overlays");
    static constexpr int kSmemBytes = kSmemElems * int(sizeof(Element));
    static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB of shared memory");
    static_assert((Warp::kSmemQElems * int(sizeof(Element))) % 16 == 0, "the merge scratch is 16-byte aligned");
};

// The training forward's tile of each head dim (tiles.h: the planner reads the same numbers).
template <int kHeadDim, typename Element>
using DefaultFwdTraits = FwdTraits<kHeadDim, tiles::forward_sm80(kHeadDim).block_m, tiles::forward_sm80(kHeadDim).block_n,
                                   tiles::forward_sm80(kHeadDim).warps, Element>;

} // namespace flashattn::cuda::kernels
