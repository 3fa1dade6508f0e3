// Tiling of the Hopper (sm_90a) forward kernel and the CuTe objects derived from it.
//
// Same algorithm as fwd_kernel.cuh; the difference is the instruction that does the matrix
// products and the schedule. wgmma (warpgroup MMA) reads its B operand, and for S = Q K^T also its
// A operand, straight from shared memory, so the ldmatrix traffic and the register fragments of Q,
// K and V disappear, and one instruction covers a 64 x N x 16 product where mma.sync covers
// 16 x 8 x 16.
//
// A CTA is a producer warpgroup that only loads and two or three consumer warpgroups owning
// kBlockM = 128 or 192 query rows, 64 each (wgmma's M); they share each K/V block in shared memory.
// Under a causal or local mask each consumer computes only the key blocks its own rows see, so a
// 192-row tile on the diagonal costs what two 128-row tiles would (fwd_kernel_sm90.cuh).
// Inside a consumer the rows split over its warps exactly as in the SM80 kernel (warp w owns rows
// 16w..16w+15, a quad of lanes shares each row), so the online softmax and the score policies are
// the same code.
#pragma once

#include "kernels/kernel_code.h"
#if FLASHATTN_KERNEL_CODE
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include "device/gmem_copies.cuh"
#endif
#include "kernels/tiles.h"

#if FLASHATTN_KERNEL_CODE
#include <cute/tensor.hpp>
#endif
#include <cutlass/numeric_types.h>

#include <type_traits>

namespace flashattn::cuda::kernels {

using namespace cute;

// kHeadDim is the head dim of Q and K (S = Q K^T), kHeadDimV that of V and O (O = P V): equal but for
// the value-dim instances (tiles::forward_sm90_value_dim), where everything V and O hold (their shared
// memory, P V's N, O's accumulator and store, V's copies) is kHeadDimV wide.
template <int kHeadDim_, int kBlockN_, typename Element_, int kHeadDimV_ = kHeadDim_,
          int kBlockM_ = tiles::forward_sm90(kHeadDim_, kHeadDimV_).block_m>
struct Sm90FwdTraits {
    using Element = Element_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kHeadDimV = kHeadDimV_;
    // Consumers: each owns 64 query rows; they share the K/V blocks (tiles::forward_sm90: how many).
    static constexpr int kBlockM = kBlockM_;
    static_assert(kBlockM == tiles::forward_sm90(kHeadDim, kHeadDimV).block_m, "a tile that kernels/tiles.h does not name");
    static constexpr int kWarpGroups = kBlockM / 64;
    static constexpr int kBlockN = kBlockN_;
    static constexpr int kThreads = 128 * kWarpGroups; // the consumers (the MMAs, the O store)
    static constexpr int kProducerThreads = 128;       // one warpgroup that loads Q, K and V
    static constexpr int kCtaThreads = kThreads + kProducerThreads;
    static constexpr int kStages = 2; // K and V blocks in flight (each a ring of this many)

    static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>);
    static_assert(kHeadDim % 32 == 0 && kHeadDimV % 32 == 0 && kBlockN % 16 == 0);

#if FLASHATTN_KERNEL_CODE
    // S = Q K^T: both operands in shared memory, K-major (the head dim is contiguous in both).
    using WarpGroups = Layout<Shape<Int<kWarpGroups>, _1, _1>>; // stacked along the query rows
    using TiledMmaS = decltype(make_tiled_mma(
        GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kHeadDim>>>(), WarpGroups{}));
    // The same product with Q from registers (RS, kQInRegisters): Q is read from shared memory once
    // a tile (ldmatrix) instead of at every S, a third of S's shared-memory reads.
    using TiledMmaSQRegs = decltype(make_tiled_mma(
        GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kBlockN>, Int<kHeadDim>>>(), WarpGroups{}));
    using SmemCopyQ = Copy_Atom<SM75_U32x4_LDSM_N, Element>;
    // The same product over the first half of a key block (kNarrowDiagonal).
    using TiledMmaSQRegsHalf = decltype(make_tiled_mma(
        GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kBlockN / 2>, Int<kHeadDim>>>(), WarpGroups{}));
    // O += P V: P from registers (the S accumulator converted to 16 bits), V from shared memory.
    // V is stored keys x head_dim_v, so as the B operand (head_dim_v x keys) it is MN-major.
    using TiledMmaO = decltype(make_tiled_mma(
        GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDimV>, Int<kBlockN>>, GMMA::Major::K,
                             GMMA::Major::MN>(),
        WarpGroups{}));

    // Shared memory in wgmma's canonical swizzled layouts: rows of 64 elements (128 bytes) with
    // 16-byte chunks XOR-ed by row, or 32-element rows when the width is not a multiple of 64.
    template <int kCols>
    using SmemAtomOf = std::conditional_t<kCols % 64 == 0, GMMA::Layout_K_SW128_Atom<Element>,
                                          GMMA::Layout_K_SW64_Atom<Element>>;
    using SmemLayoutQ = decltype(tile_to_shape(SmemAtomOf<kHeadDim>{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    using SmemLayoutK = decltype(tile_to_shape(SmemAtomOf<kHeadDim>{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    using SmemLayoutV = decltype(tile_to_shape(SmemAtomOf<kHeadDimV>{}, Shape<Int<kBlockN>, Int<kHeadDimV>>{}));
    // V seen as V^T (head_dim_v x keys): the same bytes, an MN-major operand for wgmma.
    using SmemLayoutVt = decltype(composition(SmemLayoutV{},
                                              make_layout(Shape<Int<kHeadDimV>, Int<kBlockN>>{}, GenRowMajor{})));
    using SmemLayoutO = decltype(tile_to_shape(SmemAtomOf<kHeadDimV>{}, Shape<Int<kBlockM>, Int<kHeadDimV>>{}));
#endif

    // O is staged for its store in a buffer of its own where one fits (d <= 192 with equal widths):
    // Q's buffer is then free as soon as a tile's last S = Q K^T is done, and the next tile's Q loads
    // under the last P V and the epilogue. Where it does not fit beside Q and the rings (d256, and
    // 192 / 128 with its 128-key blocks), O is staged in Q's buffer, which frees only after the store.
    static constexpr int kQBytes = kBlockM * kHeadDim * int(sizeof(Element));
    static constexpr int kOBytes = kBlockM * kHeadDimV * int(sizeof(Element));
    static constexpr int kKStageBytes = kBlockN * kHeadDim * int(sizeof(Element));
    static constexpr int kVStageBytes = kBlockN * kHeadDimV * int(sizeof(Element));
    // mbarriers: K/V filled and released per stage, two per Q buffer, the tile ring's four; then its
    // two slots (counted for two Q buffers whether or not they fit).
    static constexpr int kBarrierBytes = (4 * kStages + 4 + 4) * 8 + 2 * 4;
    static constexpr int kRingBytes = kStages * (kKStageBytes + kVStageBytes);
    static constexpr bool kOwnOBuffer = kQBytes + kOBytes + kRingBytes + kBarrierBytes <= 227 * 1024;
    // Q in two buffers where they fit beside O's own and there are two consumers (d65-128): tile
    // i + 1's Q loads while tile i runs, where with one buffer it could load only once every
    // consumer's last S of tile i was done and arrived ~2,000 cycles after the consumers were ready
    // for it (H200, d128, clock64 stamps, docs/perf-log.md, X and Y): 5% of a 1k-token tile. The
    // three consumers of d <= 64 gained nothing from it, and their extras kernel (160 registers)
    // doubled its spills in the step loop.
    static constexpr int kQBuffers =
        kWarpGroups == 2 && kOwnOBuffer && 2 * kQBytes + kOBytes + kRingBytes + kBarrierBytes <= 227 * 1024 ? 2 : 1;
    static constexpr int kSmemBytes = kQBuffers * kQBytes + (kOwnOBuffer ? kOBytes : 0) + kRingBytes + kBarrierBytes;
    static_assert(kSmemBytes <= 227 * 1024, "Q and two stages of K and V must fit in shared memory");
    static_assert(kOwnOBuffer || kOBytes <= kQBytes, "O staged in Q's buffer must fit there");
    // Each buffer starts on a 1024-byte swizzle period (the layouts' XOR pattern repeats every 8 rows
    // of 128 bytes; TMA's swizzle is computed from the shared address).
    static_assert(kQBytes % 1024 == 0 && kKStageBytes % 1024 == 0 && kVStageBytes % 1024 == 0);

#if FLASHATTN_KERNEL_CODE
    // Registers -> shared for O: stmatrix, 16 bytes of four 8 x 8 matrices per thread and
    // instruction, from a 32-bit shared address (per-thread 4-byte stores came out as generic
    // stores with the swizzle computed on 64-bit addresses, ~6 instructions each).
    using SmemCopyO = Copy_Atom<SM90_U32x4_STSM_N, Element>;
#endif

    // Global <-> shared, 16-byte chunks in swizzle-row-wide column blocks: loads by the producer's
    // threads (SwizzledTileCopy, producer_copies.cuh) and its TMA boxes, the O store by the consumers'
    // (gmem_copies.cuh). Q and K in kSwizzleCols-wide blocks, V and O in kSwizzleColsV-wide ones.
    static constexpr int kSwizzleCols = kHeadDim % 64 == 0 ? 64 : 32;
    static constexpr int kSwizzleColsV = kHeadDimV % 64 == 0 ? 64 : 32;
    // O's store: with O in its own buffer each consumer stages and stores its own 64 rows and
    // synchronises only its warpgroup, so the consumers keep their ping-pong offsets into the next
    // tile; with O in Q's buffer all must be done with Q first, and they store the tile together.
    static constexpr int kEpilogueRows = kOwnOBuffer ? 64 : kBlockM;
    static constexpr int kEpilogueThreads = kOwnOBuffer ? 128 : kThreads;
#if FLASHATTN_KERNEL_CODE
    using GmemStore = typename GmemTileCopies<Element, kSwizzleColsV, kEpilogueThreads>::Store;
#endif
    // Registers per thread after setmaxnreg. A CTA gets kLaunchRegs per thread at launch
    // (__launch_bounds__(384, 1): 65536 / 384 rounded down to 8 = 168), and setmaxnreg.inc waits
    // until the registers it asks for have been released by the CTA's other warps: the split must
    // fit the launch allocation, not the 64K register file, or the consumers wait forever (48 + 232
    // = 65536 > 64512 hung on the first Hopper problem, docs/perf-log.md). Within it: where O's
    // accumulator is at most 64 x 128 per consumer (d <= 128, 192 / 128) the producer keeps 40 (it
    // spills 36 B at d128, 64 B at 192 / 128, in its per-tile code, none in its K/V block loop) and
    // the consumers 232 (no spills in the plain kernel; at 192 / 128, 24 / 240 spilled 328 B, the
    // producer starved); with a wider O (d192, d256) the consumers need 240 (232 spilled 124 B at
    // d256), which leaves the producer 24 (200 B of spills at d256, all in the producer: the TMA
    // thread's coordinates beside the cp.async path's addresses); ptxas -v, bf16.
    static constexpr int kLaunchRegs = 65536 / kCtaThreads / 8 * 8;
    // Whether the kernel runs in its looping form (a CTA loops over tiles, fwd_kernel_sm90.cuh),
    // the only form compiled where O's accumulator is at most 64 x 128; above, the one-tile form is.
    // There the loop's state does not fit beside O's accumulator (128 of the consumers' 240
    // registers at d256) and a 24-register producer: the looping form spilled 624 B (plain) / 836 B
    // (extras) at d256 against 16 / 40 B for one tile, and ran d256 8-22% slower at 512-1k tokens
    // than the one-tile kernel, while persistence gained it 0-3%.
    static constexpr bool kCanPersist = tiles::forward_sm90(kHeadDim, kHeadDimV).can_persist;
    // Three consumers (512 threads, 128 registers each at launch) split 32 / 160: the whole file.
    // Q in registers for S (the plain kernel, fwd_kernel_sm90.cuh), where it was measured: d128, 32
    // registers a thread, which the consumers' 232 hold without new spills in the step loops. On the
    // H200 at the power cap it saves energy, not cycles: the same kernel ran 1-2% higher clocks at
    // 16k for a 1% lower tensor share per cycle, +1% TFLOP/s non-causal, 0 causal and at 1k.
    static constexpr bool kQInRegisters = kHeadDim == 128 && kHeadDimV == 128 && kWarpGroups == 2;
    // A consumer whose rows see only the first half of its first (diagonal) key block computes that
    // block's S = Q K^T and P V over the half (the plain kernel with Q in registers): under an aligned
    // causal mask the first consumer of every 128-row tile (at 1k, 8 of a head's 72 consumer blocks).
    static constexpr bool kNarrowDiagonal = kQInRegisters && kBlockN == 128;
    static constexpr bool kNarrowO = kHeadDimV <= 128;
    static constexpr int kProducerRegs = kWarpGroups == 3 ? 32 : kNarrowO ? 40 : 24;
    static constexpr int kConsumerRegs = kWarpGroups == 3 ? 160 : kNarrowO ? 232 : 240;
    static_assert(kProducerThreads * kProducerRegs + kThreads * kConsumerRegs <= kLaunchRegs * kCtaThreads,
                  "setmaxnreg would ask for more registers than the CTA was launched with");
};

// The tile of (head dim, value head dim): tiles::forward_sm90's.
template <int kHeadDim, typename Element, int kHeadDimV = kHeadDim>
using DefaultSm90FwdTraits = Sm90FwdTraits<kHeadDim, tiles::forward_sm90(kHeadDim, kHeadDimV).block_n, Element, kHeadDimV>;

} // namespace flashattn::cuda::kernels
