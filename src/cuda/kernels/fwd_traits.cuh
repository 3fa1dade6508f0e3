// Per-head-dim tiling of the forward kernel, and the CuTe objects derived from it.
//
// A FwdTraits instance answers every "how is the data laid out and moved" question, so the kernel
// body only says what happens, never how many threads touch which bytes.
#pragma once

#include "kernels/gmem_copies.cuh"

#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include <type_traits>

namespace flashattn::cuda::kernels {

using namespace cute;

// Tile sizes per head dim, chosen by measurement on an H200 (docs/perf-log.md): query rows per CTA
// (kBlockM), keys per K/V block (kBlockN), warps. Warps are stacked along the query rows only, so
// each warp owns whole rows of S and its softmax needs no shared memory.
template <int kHeadDim>
struct FwdTileConfig;
template <> struct FwdTileConfig<32> { static constexpr int kBlockM = 128, kBlockN = 128, kWarps = 4; };
template <> struct FwdTileConfig<64> { static constexpr int kBlockM = 128, kBlockN = 128, kWarps = 4; };
template <> struct FwdTileConfig<96> { static constexpr int kBlockM = 128, kBlockN = 64, kWarps = 4; };
template <> struct FwdTileConfig<128> { static constexpr int kBlockM = 128, kBlockN = 64, kWarps = 4; };
template <> struct FwdTileConfig<192> { static constexpr int kBlockM = 128, kBlockN = 64, kWarps = 8; };
template <> struct FwdTileConfig<256> { static constexpr int kBlockM = 128, kBlockN = 64, kWarps = 8; };

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

    // Tensor cores: one m16n8k16 mma.sync per atom (fp32 accumulate); warps along M only. The
    // N extent 16 lets one ldmatrix.x4 feed two n8 atoms.
    using MmaOp = std::conditional_t<std::is_same_v<Element, cutlass::half_t>, SM80_16x8x16_F32F16F16F32_TN,
                                     SM80_16x8x16_F32BF16BF16F32_TN>;
    using TiledMma = TiledMMA<MMA_Atom<MmaOp>, Layout<Shape<Int<kWarps>, _1, _1>>, Tile<Int<16 * kWarps>, _16, _16>>;

    // Shared memory: rows of 64 (or 32) elements, 16-byte chunks XOR-swizzled by row so that both
    // the row-wise cp.async writes and the column-wise ldmatrix reads hit 8 different bank groups.
    static constexpr int kSwizzleCols = kHeadDim % 64 == 0 ? 64 : 32;
    static constexpr int kSwizzleBits = kSwizzleCols == 64 ? 3 : 2;
    using SmemAtom = decltype(composition(Swizzle<kSwizzleBits, 3, 3>{},
                                          Layout<Shape<_8, Int<kSwizzleCols>>, Stride<Int<kSwizzleCols>, _1>>{}));
    using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    using SmemLayoutKV = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    // V read as V^T (head_dim x keys) for the B operand of P.V: same bytes, transposed view.
    using SmemLayoutVt = decltype(composition(SmemLayoutKV{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
    using SmemLayoutO = SmemLayoutQ; // O is staged in Q's buffer

    static constexpr int kSmemQElems = kBlockM * kHeadDim;
    static constexpr int kSmemKVElems = kBlockN * kHeadDim;
    static constexpr int kSmemBytes = (kSmemQElems + 2 * kKvStages * kSmemKVElems) * int(sizeof(Element));
    static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB of shared memory");

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
};

// The inference variant (paged K/V, KV cache, split-KV, packed GQA heads) serves decoding, where a
// tile holds a handful of query rows and the kernel is bound by reading K and V: 64 query rows, so
// the wasted MMA rows cost less, and long K/V blocks (FlashAttention-2's split-KV tiles).
// kKvStages: the deepest ring of (K, V) blocks with which two CTAs still share an SM (228 KB of
// shared memory, 1 KB of it reserved per CTA): at d128, 16 KB of Q + 3 x 32 KB = 112 KB, two blocks
// (64 KB) in flight per CTA. At d192/d256 a stage is 48/64 KB: two stages, one CTA per SM.
template <int kHeadDim>
struct InferenceTileConfig {
    static constexpr int kBlockM = 64, kWarps = 4;
    static constexpr int kBlockN = kHeadDim <= 64 ? 128 : 64;
    static constexpr int kKvStages = kHeadDim <= 128 ? 3 : 2;
};

// The narrow decode tile: one warp, 16 query rows (one MMA row tile), K/V blocks of 64 keys (32
// above d128) in two stages: 68-72 KB of shared memory, three CTAs per SM.
template <int kHeadDim>
struct NarrowInferenceTileConfig {
    static constexpr int kBlockM = 16, kWarps = 1;
    static constexpr int kBlockN = kHeadDim <= 128 ? 64 : 32;
    static constexpr int kKvStages = 2;
};

// kSchedule (inference_launch.h's InferenceSchedule as an int: 0 pipelined, 1 narrow, 2 single
// buffer, the schedule before the ring, kept so that one build can compare them).
template <int kHeadDim, typename Element, int kSchedule = 0>
using InferenceFwdTraits = std::conditional_t<
    kSchedule == 1,
    FwdTraits<kHeadDim, NarrowInferenceTileConfig<kHeadDim>::kBlockM, NarrowInferenceTileConfig<kHeadDim>::kBlockN,
              NarrowInferenceTileConfig<kHeadDim>::kWarps, Element, NarrowInferenceTileConfig<kHeadDim>::kKvStages>,
    FwdTraits<kHeadDim, InferenceTileConfig<kHeadDim>::kBlockM, InferenceTileConfig<kHeadDim>::kBlockN,
              InferenceTileConfig<kHeadDim>::kWarps, Element,
              kSchedule == 0 ? InferenceTileConfig<kHeadDim>::kKvStages : 1>>;

template <int kHeadDim, typename Element>
using DefaultFwdTraits = FwdTraits<kHeadDim, FwdTileConfig<kHeadDim>::kBlockM, FwdTileConfig<kHeadDim>::kBlockN,
                                   FwdTileConfig<kHeadDim>::kWarps, Element>;

} // namespace flashattn::cuda::kernels
