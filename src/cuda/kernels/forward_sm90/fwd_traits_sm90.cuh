// Tiling of the Hopper (sm_90a) forward kernel and the CuTe objects derived from it.
//
// Same algorithm as fwd_kernel.cuh; the difference is the instruction that does the matrix
// products and the schedule. wgmma (warpgroup MMA) reads its B operand, and for S = Q K^T also its
// A operand, straight from shared memory, so the ldmatrix traffic and the register fragments of Q,
// K and V disappear, and one instruction covers a 64 x N x 16 product where mma.sync covers
// 16 x 8 x 16.
//
// A CTA is three warpgroups (384 threads): a producer that only loads, and two consumers owning
// kBlockM = 128 query rows, 64 each (wgmma's M); they share each K/V block in shared memory.
// Inside a consumer the rows split over its warps exactly as in the SM80 kernel (warp w owns rows
// 16w..16w+15, a quad of lanes shares each row), so the online softmax and the score policies are
// the same code.
#pragma once

#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include "device/gmem_copies.cuh"
#include "kernels/tiles.h"

#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include <type_traits>

namespace flashattn::cuda::kernels {

using namespace cute;

template <int kHeadDim_, int kBlockN_, typename Element_>
struct Sm90FwdTraits {
    using Element = Element_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kWarpGroups = 2; // consumers: each owns 64 query rows; they share the K/V blocks
    static constexpr int kBlockM = 64 * kWarpGroups;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kThreads = 128 * kWarpGroups; // the consumers (the MMAs, the O store)
    static constexpr int kProducerThreads = 128;       // one warpgroup that loads Q, K and V
    static constexpr int kCtaThreads = kThreads + kProducerThreads;
    static constexpr int kStages = 2; // K and V blocks in flight (each a ring of this many)

    static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>);
    static_assert(kHeadDim % 32 == 0 && kBlockN % 16 == 0);

    // S = Q K^T: both operands in shared memory, K-major (the head dim is contiguous in both).
    using WarpGroups = Layout<Shape<Int<kWarpGroups>, _1, _1>>; // stacked along the query rows
    using TiledMmaS = decltype(make_tiled_mma(
        GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kHeadDim>>>(), WarpGroups{}));
    // O += P V: P from registers (the S accumulator converted to 16 bits), V from shared memory.
    // V is stored keys x head_dim, so as the B operand (head_dim x keys) it is MN-major.
    using TiledMmaO = decltype(make_tiled_mma(
        GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockN>>, GMMA::Major::K,
                             GMMA::Major::MN>(),
        WarpGroups{}));

    // Shared memory in wgmma's canonical swizzled layouts: rows of 64 elements (128 bytes) with
    // 16-byte chunks XOR-ed by row, or 32-element rows when the head dim is not a multiple of 64.
    using SmemAtom = std::conditional_t<kHeadDim % 64 == 0, GMMA::Layout_K_SW128_Atom<Element>,
                                        GMMA::Layout_K_SW64_Atom<Element>>;
    using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    using SmemLayoutKV = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    // V seen as V^T (head_dim x keys): the same bytes, an MN-major operand for wgmma.
    using SmemLayoutVt = decltype(composition(SmemLayoutKV{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
    using SmemLayoutO = SmemLayoutQ;

    // O is staged for its store in a buffer of its own where one fits (d <= 128): Q's buffer is then
    // free as soon as a tile's last S = Q K^T is done, and the next tile's Q loads under the last
    // P V and the epilogue. Above d128 it does not fit beside Q and the rings, and O is staged in
    // Q's buffer, which frees only after the store.
    static constexpr int kTileBytes = kBlockM * kHeadDim * int(sizeof(Element));
    // mbarriers: K/V filled and released per stage, Q's two, the tile ring's four; then its two slots.
    static constexpr int kBarrierBytes = (4 * kStages + 2 + 4) * 8 + 2 * 4;
    static constexpr int kRingBytes = 2 * kStages * kBlockN * kHeadDim * int(sizeof(Element));
    static constexpr bool kOwnOBuffer = 2 * kTileBytes + kRingBytes + kBarrierBytes <= 227 * 1024;
    static constexpr int kSmemBytes = (kOwnOBuffer ? 2 : 1) * kTileBytes + kRingBytes + kBarrierBytes;
    static_assert(kSmemBytes <= 227 * 1024, "Q and two stages of K and V must fit in shared memory");

    // Registers -> shared for O: each thread holds pairs of neighbouring columns.
    using SmemCopyO = Copy_Atom<UniversalCopy<uint32_t>, Element>;

    // Global <-> shared, 16-byte chunks in kSwizzleCols-wide rows: loads by the producer's threads
    // (SwizzledTileCopy, producer_copies.cuh), the O store by the consumers' (gmem_copies.cuh).
    static constexpr int kSwizzleCols = kHeadDim % 64 == 0 ? 64 : 32;
    // O's store: with O in its own buffer each consumer stages and stores its own 64 rows and
    // synchronises only its warpgroup, so the two keep their ping-pong offset into the next tile;
    // with O in Q's buffer both must be done with Q first, and they store the tile together.
    static constexpr int kEpilogueRows = kOwnOBuffer ? 64 : kBlockM;
    static constexpr int kEpilogueThreads = kOwnOBuffer ? 128 : kThreads;
    using GmemStore = typename GmemTileCopies<Element, kSwizzleCols, kEpilogueThreads>::Store;
    // Registers per thread after setmaxnreg. A CTA gets kLaunchRegs per thread at launch
    // (__launch_bounds__(384, 1): 65536 / 384 rounded down to 8 = 168), and setmaxnreg.inc waits
    // until the registers it asks for have been released by the CTA's other warps: the split must
    // fit the launch allocation, not the 64K register file, or the consumers wait forever (48 + 232
    // = 65536 > 64512 hung on the first Hopper problem, docs/perf-log.md). Within it: at
    // d <= 128 the producer keeps 40 (it spills 36 B in its own code walking several tiles) and
    // the consumers 232; above d128 the consumers need 240 (232 spilled 124 B at d256), which
    // leaves the producer 24 (200 B of spills at d256, all in the producer: the TMA thread's
    // coordinates beside the cp.async path's addresses); ptxas -v, bf16.
    static constexpr int kLaunchRegs = 65536 / kCtaThreads / 8 * 8;
    // Whether the kernel runs in its looping form (a CTA loops over tiles, fwd_kernel_sm90.cuh),
    // the only form compiled up to d128; above, the one-tile form is. Above d128 the loop's state
    // does not fit beside O's accumulator (128 of the consumers' 240 registers) and a 24-register
    // producer: the looping form spilled 624 B (plain) / 836 B (extras) at d256 against 16 / 40 B
    // for one tile, and ran d256 8-22% slower at 512-1k tokens than the one-tile kernel, while
    // persistence gained it 0-3%.
    static constexpr bool kCanPersist = tiles::forward_sm90(kHeadDim).can_persist;
    static constexpr int kProducerRegs = kHeadDim <= 128 ? 40 : 24;
    static constexpr int kConsumerRegs = kHeadDim <= 128 ? 232 : 240;
    static_assert(kProducerThreads * kProducerRegs + kThreads * kConsumerRegs <= kLaunchRegs * kCtaThreads,
                  "setmaxnreg would ask for more registers than the CTA was launched with");
};

template <int kHeadDim, typename Element>
using DefaultSm90FwdTraits = Sm90FwdTraits<kHeadDim, tiles::forward_sm90(kHeadDim).block_n, Element>;

} // namespace flashattn::cuda::kernels
