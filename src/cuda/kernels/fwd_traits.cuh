// Per-head-dim tiling of the forward kernel, and the CuTe objects derived from it.
//
// A FwdTraits instance answers every "how is the data laid out and moved" question, so the kernel
// body only says what happens, never how many threads touch which bytes.
#pragma once

#include "kernels/gmem_copies.cuh"
#include "kernels/producer_copies.cuh"

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

// The split-keys decode tile (fwd_decode_kernel.cuh): kWarps warps share one 16-row query tile, and
// each streams its own K/V blocks (the CTA's blocks n_end - 1 - warp, n_end - 1 - warp - kWarps, ...)
// through its own ring of kKvStages stages, with its own online softmax; the warps' partial results
// are merged through shared memory at the end. No CTA-wide barrier in the main loop, so each warp
// (one per SM sub-partition) keeps its own loads in flight. Blocks of 16 keys (32 at d <= 64, where
// 64 keys at d32 spilled): a ring stage of K and V is 8 KB at d64 and d128.
//   kDeep = false: as many stages (at least 3) as leave room for two CTAs per SM (<= 110 KB of
//                  shared memory each): d128 3 stages, 100 KB, 8 warps and 16 blocks in flight per SM;
//   kDeep = true:  as many (3 to 6) as fit in 200 KB, one CTA per SM: d128 6 stages, 196 KB, 4 warps
//                  and 20 blocks in flight per SM. On the H200 the 3-stage ring reads a saturated
//                  HBM as well or better (session 14: 96-128 items unsplit, up to 8%), so the rule
//                  (inference.cu) no longer picks the deep ring; FLASHATTN_CUDA_DECODE=split_keys_deep
//                  and FLASHATTN_CUDA_DECODE_UNSPLIT=deep still run it (A/B timing, tests).
//   A/B builds (FLASHATTN_CUDA_EXPERIMENT_DEFINES) may set FLASHATTN_DECODE_WARPS (warps per CTA),
//   FLASHATTN_DECODE_BLOCK_N (keys per warp block, every head dim) and FLASHATTN_DECODE_DEEP_STAGES
//   (the deep ring's stage cap); unset: the above.
#ifndef FLASHATTN_DECODE_WARPS
#define FLASHATTN_DECODE_WARPS 0
#endif
#ifndef FLASHATTN_DECODE_BLOCK_N
#define FLASHATTN_DECODE_BLOCK_N 0
#endif
#ifndef FLASHATTN_DECODE_DEEP_STAGES // and the deep ring's stage cap (6 unset)
#define FLASHATTN_DECODE_DEEP_STAGES 6
#endif
template <int kHeadDim, bool kDeep>
struct SplitKeysDecodeTileConfig {
    static constexpr int kWarps = FLASHATTN_DECODE_WARPS > 0 ? FLASHATTN_DECODE_WARPS : 4;
    static constexpr int kBlockN = FLASHATTN_DECODE_BLOCK_N > 0 ? FLASHATTN_DECODE_BLOCK_N : kHeadDim <= 64 ? 32 : 16;
    static constexpr int kQBytes = 16 * kHeadDim * 2;
    static constexpr int kStageBytes = 2 * kBlockN * kHeadDim * 2; // K and V
    static constexpr int kBudget = (kDeep ? 200 : 110) * 1024;
    static constexpr int kFit = (kBudget - kQBytes) / (kWarps * kStageBytes);
    static constexpr int kMaxStages = kDeep ? FLASHATTN_DECODE_DEEP_STAGES : 6;
    static constexpr int kKvStages = kFit < 3 ? 3 : kFit > kMaxStages ? kMaxStages : kFit;
};

// The split-keys kernel's traits: Warp answers every question about one warp's tile (16 query rows,
// its MMA, its copies, the layout of one ring stage), as the narrow tile's FwdTraits with one warp;
// the CTA adds the warp count, the shared-memory plan and the merge's scratch.
template <int kHeadDim, typename Element, bool kDeep>
struct SplitKeysDecodeTraits {
    using Config = SplitKeysDecodeTileConfig<kHeadDim, kDeep>;
    using Warp = FwdTraits<kHeadDim, 16, Config::kBlockN, 1, Element, Config::kKvStages>;
    static constexpr int kWarps = Config::kWarps;
    static constexpr int kThreads = 32 * kWarps;
    static constexpr int kBlockM = Warp::kBlockM;
    static constexpr int kBlockN = Warp::kBlockN;
    static constexpr int kKvStages = Warp::kKvStages;
    // A warp's K/V block copy: base addresses plus constants, unpredicated for whole blocks.
    using KvCopy = SwizzledTileCopy<Element, typename Warp::SmemLayoutKV, 32, Warp::kSwizzleCols>;

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

template <int kHeadDim, typename Element>
using DefaultFwdTraits = FwdTraits<kHeadDim, FwdTileConfig<kHeadDim>::kBlockM, FwdTileConfig<kHeadDim>::kBlockN,
                                   FwdTileConfig<kHeadDim>::kWarps, Element>;

} // namespace flashattn::cuda::kernels
