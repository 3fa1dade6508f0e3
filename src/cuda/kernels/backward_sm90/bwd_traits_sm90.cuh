// Tiling of the Hopper (sm_90a) backward kernel and the CuTe objects derived from it
// (bwd_kernel_sm90.cuh; FlashAttention-3's scheme for the backward).
//
// A CTA is one producer warpgroup (cp.async of K/V, Q/dO, lse/dsum) and two consumer warpgroups,
// each owning 64 of the kBlockN = 128 keys of a key block (wgmma's M). The products are computed
// with keys as rows, so that what the dK/dV products need lands in the registers of the thread
// that needs it:
//   S^T  = K Q^T         (keys x queries)   SS: K and Q from shared memory (both K-major)
//   dP^T = V dO^T        (keys x queries)   SS
//   dV  += P^T dO        (keys x head dim)  RS: P^T is the S^T accumulator converted to 16 bits,
//   dK  += dS^T Q        (keys x head dim)  RS  the A operand in registers; dO, Q read as (head dim,
//                                               queries) views: MN-major B operands
//   dQ   = dS K          (queries x head dim) SS: dS^T goes to shared memory (the only product that
//                                               needs all keys of a query row); A = dS MN-major,
//                                               B = K^T view MN-major; each consumer warpgroup
//                                               computes half of dQ: its columns (64 queries),
//                                               its query rows (d64's 128), or, transposed
//                                               (dQ^T = K^T dS^T), half the head dim (d128's 80)
// Per consumer thread (query rows per block: tiles::backward_sm90_block_m): d128 at 80 queries dK,
// dV 64 + 64 fp32 registers, S^T, dP^T 40 + 40, dQ^T 40; d64 at 128 queries dK, dV 32 + 32, S^T,
// dP^T 64 + 64, dQ 32 (64 queries x the whole head dim per warpgroup).
//
// Unlike the other traits (kernels/kernel_code.h), these derive their shared-memory sizes from the
// layouts' cosize, so an instance unit's host pass still parses their CuTe types (a few seconds per
// Hopper backward unit): moving the sizes to integers, as the other traits have them, is open.
#pragma once

#include "kernels/tiles.h"

#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#include <cutlass/numeric_types.h>

#include <type_traits>

namespace flashattn::cuda::kernels {

using namespace cute;

template <int kHeadDim_, typename Element_, int kBlockM_ = tiles::backward_sm90_block_m(kHeadDim_)>
struct Sm90BwdTraits {
    using Element = Element_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kConsumerWarpGroups = 2;
    static constexpr int kBlockN = 64 * kConsumerWarpGroups; // keys: 64 per consumer warpgroup
    static constexpr int kBlockM = kBlockM_; // queries per Q/dO stage (a multiple of 16: dV's, dK's k steps)
    static constexpr int kConsumerThreads = 128 * kConsumerWarpGroups;
    static constexpr int kProducerThreads = 128;
    static constexpr int kThreads = kConsumerThreads + kProducerThreads;
    static constexpr int kQStages = 2; // Q/dO/lse/dsum stages in flight
    static constexpr int kDsBuffers = 2; // dS^T is written for block m while dQ of block m-1 may still read

    static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>);
    static_assert(tiles::backward_sm90_has(kHeadDim) && !tiles::backward_sm90_pds_schedule(kHeadDim), "see tiles.h");
    static constexpr bool kPdSSchedule = false; // bwd_kernel_sm90.cuh
    // The planner plans deterministic chunks with the mma.sync kernel's key blocks.
    static_assert(kBlockN == tiles::backward(kHeadDim).block_n);

    using AlongM = Layout<Shape<Int<kConsumerWarpGroups>, _1, _1>>; // warpgroups stacked along keys
    // S^T = K Q^T and dP^T = V dO^T.
    using TiledMmaSdP = decltype(make_tiled_mma(
        GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockM>, Int<kHeadDim>>>(), AlongM{}));
    static_assert(size<1>(typename TiledMmaSdP::AtomShape_MNK{}) == kBlockM,
                  "one wgmma as wide as the query block (N = 80 needs CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED, "
                  "src/cuda/CMakeLists.txt)");
    // dV += P^T dO and dK += dS^T Q.
    using TiledMmaKV = decltype(make_tiled_mma(
        GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockM>>, GMMA::Major::K,
                             GMMA::Major::MN>(),
        AlongM{}));
    // dQ = dS K, reduced over all kBlockN keys, split between the warpgroups so that each wgmma is
    // at least 64 wide: along the queries where the block has a 64-row part for each (d64: 128
    // queries, each warpgroup 64 x the whole head dim), along the columns at 64 queries (64 x head
    // dim / 2 each); and where the queries are no multiple of 64 (wgmma's M), transposed: dQ^T =
    // K^T dS^T with the head dim as M, each warpgroup half of it x all the queries (d128's 80).
    static constexpr bool kDqTransposed = kBlockM % 64 != 0;
    static constexpr int kDqRowSplit = kDqTransposed ? 1 : kBlockM / 64;
    static constexpr int kDqColSplit = kConsumerWarpGroups / kDqRowSplit;
    static_assert(kDqRowSplit * kDqColSplit == kConsumerWarpGroups);
    static constexpr int kDqColsPerWarpGroup = kHeadDim / kDqColSplit;
    using TiledMmaDq = std::conditional_t<
        kDqTransposed,
        decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockM>, Int<kBlockN>>,
                                                     GMMA::Major::MN, GMMA::Major::K>(),
                                Layout<Shape<Int<kConsumerWarpGroups>, _1, _1>>{})),
        decltype(make_tiled_mma(
            GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kDqColsPerWarpGroup>, Int<kBlockN>>,
                                 GMMA::Major::MN, GMMA::Major::MN>(),
            Layout<Shape<Int<kDqRowSplit>, Int<kDqColSplit>, _1>>{}))>;
    // dQ's accumulator as (rows, columns) of the tile it computes: (queries, head dim), or (head dim,
    // queries) transposed.
    using DqShape = std::conditional_t<kDqTransposed, Shape<Int<kHeadDim>, Int<kBlockM>>, Shape<Int<kBlockM>, Int<kHeadDim>>>;

    // Shared memory in wgmma's canonical swizzled layouts, 128-byte rows. An MN-major operand that a
    // warpgroup reads only part of must be cut at whole swizzle atoms: K^T is cut into the two
    // consumers' dQ column halves where dQ is split by columns.
    using SmemAtomQ = GMMA::Layout_K_SW128_Atom<Element>;
    using SmemAtomKV = std::conditional_t<kDqColsPerWarpGroup % 64 == 0, GMMA::Layout_K_SW128_Atom<Element>,
                                          GMMA::Layout_K_SW64_Atom<Element>>;
    static_assert(kDqColsPerWarpGroup % decltype(size<1>(SmemAtomKV{}))::value == 0,
                  "each consumer's dQ columns of K^T span whole swizzle atoms");
    static_assert(kHeadDim % decltype(size<1>(SmemAtomQ{}))::value == 0);
    using SmemLayoutQ = decltype(tile_to_shape(SmemAtomQ{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));   // Q, dO
    using SmemLayoutKV = decltype(tile_to_shape(SmemAtomKV{}, Shape<Int<kBlockN>, Int<kHeadDim>>{})); // K, V
    // Q and dO by TMA (bwd_params_sm90.cuh): one box per atom column, kBlockM rows of 128 bytes.
    static constexpr int kQBoxCols = decltype(size<1>(SmemAtomQ{}))::value;
    // K and V by TMA: one box per atom column, kBlockN rows.
    static constexpr int kKBoxCols = decltype(size<1>(SmemAtomKV{}))::value;
    static constexpr int kVBoxCols = kKBoxCols;
    // (head dim, rows) views of the same bytes: Q^T, dO^T (B of dK, dV) and K^T (B of dQ).
    using SmemLayoutQt = decltype(composition(SmemLayoutQ{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockM>>{}, GenRowMajor{})));
    using SmemLayoutKt = decltype(composition(SmemLayoutKV{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
    // dS (queries x keys), queries contiguous: the consumers hold dS^T with neighbouring queries in
    // register pairs, so the MN-major layout takes them by stmatrix; dQ reads it as an MN-major A.
    // Transposed dQ reads it as a K-major B, keys contiguous (an MN-major tile's queries would have to
    // be whole 64-element atoms): stmatrix's transposing form writes it.
    using SmemLayoutdS = decltype(tile_to_shape(
        std::conditional_t<kDqTransposed, GMMA::Layout_K_SW128_Atom<Element>, GMMA::Layout_MN_SW128_Atom<Element>>{},
        Shape<Int<kBlockM>, Int<kBlockN>>{}));
    using SmemCopyAtomdS = Copy_Atom<std::conditional_t<kDqTransposed, SM90_U16x8_STSM_T, SM90_U32x4_STSM_N>, Element>;
    // The (keys, queries) view the consumers write dS^T through.
    using SmemLayoutdSt = decltype(composition(SmemLayoutdS{},
                                               make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, GenRowMajor{})));

    static constexpr int kSmemQElems = cosize(SmemLayoutQ{});
    static constexpr int kSmemKVElems = cosize(SmemLayoutKV{});
    static constexpr int kSmemdSElems = cosize(SmemLayoutdS{});
    // What bwd_sm90_common.cuh reads for dO and V apart from Q and K (a value head dim of its own
    // exists only in the P/dS schedule): here the same tiles.
    static constexpr int kHeadDimV = kHeadDim;
    using SmemLayoutDo = SmemLayoutQ;
    using SmemLayoutDot = SmemLayoutQt;
    using SmemLayoutK = SmemLayoutKV;
    using SmemLayoutV = SmemLayoutKV;
    static constexpr int kSmemDoElems = kSmemQElems;
    static constexpr int kSmemKElems = kSmemKVElems;
    static constexpr int kSmemVElems = kSmemKVElems;
    static constexpr int kDoBoxCols = kQBoxCols;
    static constexpr int kSmemScoreElems = kDsBuffers * kSmemdSElems; // bwd_sm90_common.cuh's carve-up
    // Q[stages], dO[stages], K, V, dS[buffers] (1024-byte aligned each: whole swizzle periods),
    // then lse[stages][kBlockM], dsum[stages][kBlockM] in fp32, then the mbarriers.
    static constexpr int kSmemTileBytes =
        (2 * kQStages * kSmemQElems + 2 * kSmemKVElems + kDsBuffers * kSmemdSElems) * int(sizeof(Element));
    static constexpr int kSmemRowStatsBytes = 2 * kQStages * kBlockM * int(sizeof(float));
    // dQ of one query block in fp32, handed from the consumers to the producer warpgroup, which adds
    // it to the global scratch (bwd_sm90_common.cuh) while the consumers go on. Two layouts of the
    // same buffer (sm90_bwd_hand_off_dq): rows, a bulk reduction each, padded by 8 floats (the
    // consumers' float2 stores, 8 rows x 4 column pairs per warp, then fill all 32 banks in two
    // wavefronts; a row stays contiguous and 16-byte aligned, as a bulk copy needs), or, for the
    // ordered dQ, boxes of 32 columns by kBlockM rows in the 128-byte swizzle that bulk tensor
    // reductions read (Sm90BwdDqBoxes).
    static constexpr bool kDqHandoff = true;
    static constexpr bool kDqStaged = false; // (Sm90BwdPdSTraits)
    static constexpr bool kDkvTransposed = false; // (Sm90BwdPdSTraits)
    static constexpr int kDoStages = kQStages;    // dO rides in the Q stage (Sm90BwdPdSTraits)
    // Transposed dQ's registers hold neighbouring queries, stored one float each: rows padded by 4
    // floats put a warp's 32 stores on 32 banks (and leave room in shared memory at 80 queries).
    static constexpr int kDqRowStride = kHeadDim + (kDqTransposed ? 4 : 8);
    static constexpr int kDqBoxCols = 32;
    static constexpr int kDqBoxBytes = kDqBoxCols * kBlockM * int(sizeof(float));
    static constexpr int kSmemDqBytes = kBlockM * kDqRowStride * int(sizeof(float));
    // q_full, q_empty per stage; kv_full, kv_empty; dq_full[2], dq_empty.
    static constexpr int kBarriers = 2 * kQStages + 5;
    static constexpr int kSmemBytes = kSmemTileBytes + kSmemRowStatsBytes + kSmemDqBytes + kBarriers * 8;
    static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB of shared memory");

    // Registers per thread after setmaxnreg. The CTA launches with ptxas's count for 384 threads
    // (168: the largest multiple of 8 that fits 64K) and setmaxnreg only moves registers between its
    // warpgroups, so the split must fit 384 x 168: a larger sum would leave the consumers' increase
    // waiting forever. ptxas -v of the plain bf16 kernel, spill stores (consumers alone): d128 24/240
    // 812 B (128), 40/232 620 B (164). The producer's spills are the addresses of its tile copies,
    // off the tensor cores' path; the consumers' are not, so both head dims take 24/240 (as
    // FlashAttention-3): d64's 128-query blocks need the consumers' 240 (S^T and dP^T 64 fp32 each).
    static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = 240;
    static_assert(kProducerThreads * kProducerRegs + kConsumerThreads * kConsumerRegs <= kThreads * kLaunchRegs,
                  "setmaxnreg cannot hand out more registers than the CTA launched with");

    static_assert(2 * kBlockM == kProducerThreads || kBlockM <= kProducerThreads,
                  "a producer thread per lse / dsum value of a stage, or per row of it");
};

// The P/dS schedule (bwd_kernel_sm90_pds.cuh; FlashAttention-3's for its largest head dims,
// reasoned here) at d256 and at q/k 192 with v 128 (tiles::backward_sm90_value_dim): 64 queries
// per block, 80 keys at d256 and 96 at 192 / 128 (tiles::backward_sm90_block_n), the same 384
// threads. The keys-as-rows schedule above keeps the key block x the whole head dim of dK and of dV
// in each consumer's registers: far more than a thread may have at these head dims. So the head
// dims are what the consumers split for the three products that carry them, and P / dS go through
// shared memory to get there:
//   S  = Q K^T, dP = dO V^T  (queries x keys)    SS, each consumer half of the keys (n = 40 at
//                                                d256, 48 at 192 / 128) with the whole
//                                                contraction (d, resp. d_v; no redundant work);
//                                                queries as rows, so lse / dsum are per row and the
//                                                policies see the accumulators directly
//   P, dS -> shared memory (16-bit, keys contiguous), each consumer its n keys; a named barrier
//   dV^T += dO^T P           (d_v x keys)        SS, A = dO^T (MN-major view of the dO stage),
//   dK^T += Q^T dS           (d x keys)          B = P / dS (MN-major: keys contiguous)
//   dQ  = dS K               (queries x d)       SS, each consumer d / 2 columns: A = dS (K-major),
//                                                B = K^T (MN-major)
// dK and dV are transposed (the head dim as wgmma's M) because a key block of 80 or 96 keys is no
// multiple of two consumers' 64-row M extents. What the consumers split differs:
//   d256 (kDkvByHeadDim): the head dim, 128 rows of dK^T and of dV^T each (the tiled wgmma's
//     M-blocks of 64 alternate between them: consumer c rows 64c.., 128 + 64c..), all 80 keys. Its
//     A operand is then its own column blocks of the Q and dO stages, read once, and each wgmma is
//     80 wide. Per consumer thread, fp32: dK^T 80 + dV^T 80, S and dP 20 + 20 before dQ, dQ 32
//     after (computed in two 64-column halves, below): a peak of 200 of its 240.
//   192 / 128: the keys, 48 each (192 rows of dK^T would split into 96, no multiple of 64): dK^T 72
//     + dV^T 48 + dQ 48, S and dP 24 + 24 before it: a peak of 168.
// P and dS have one buffer each (two would not fit beside the dQ below): with the hand-off a named
// barrier before a block's P that each consumer reaches only after its products of the block
// before (the buffer's readers) completed; with staged dQ the wait for the producer's read of the
// block before's dQ, which followed both consumers' last products (bwd_kernel_sm90_pds.cuh).
//
// kHeadDimV (V, dO, dV: dP's contraction, dV's rows) defaults to kHeadDim; everything of Q, K, dQ,
// dK is kHeadDim wide.
template <int kHeadDim_, typename Element_, int kHeadDimV_ = kHeadDim_>
struct Sm90BwdPdSTraits {
    using Element = Element_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kHeadDimV = kHeadDimV_;
    static constexpr bool kPdSSchedule = true; // bwd_kernel_sm90_pds.cuh
    static constexpr int kConsumerWarpGroups = 2;
    static constexpr int kBlockN = tiles::backward_sm90_block_n(kHeadDim, kHeadDimV); // keys per key block
    static constexpr int kBlockM = tiles::kBackwardSm90BlockM; // queries per Q/dO stage (64)
    static constexpr bool kDkvTransposed = true; // dK^T, dV^T (above)
    // Split by the head dim where each consumer's share is whole 64-row M extents, else by keys.
    static constexpr bool kDkvByHeadDim =
        kHeadDim % (64 * kConsumerWarpGroups) == 0 && kHeadDimV % (64 * kConsumerWarpGroups) == 0;
    static constexpr int kConsumerThreads = 128 * kConsumerWarpGroups;
    static constexpr int kProducerThreads = 128;
    static constexpr int kThreads = kConsumerThreads + kProducerThreads;
    // Q/lse/dsum stages in flight: two, so that block m+1's Q (32 KB at d256) lands while block m
    // computes. dO rides in the same stages, or, with staged dQ (below), has one stage of its own.
    static constexpr int kQStages = 2;

    static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>);
    static_assert(tiles::backward_sm90_has(kHeadDim, kHeadDimV) && tiles::backward_sm90_pds_schedule(kHeadDim, kHeadDimV),
                  "see tiles.h");
    static_assert(kHeadDim % (32 * kConsumerWarpGroups) == 0 && kHeadDimV % (32 * kConsumerWarpGroups) == 0);

    using AlongN = Layout<Shape<_1, Int<kConsumerWarpGroups>, _1>>; // warpgroups side by side
    using AlongM = Layout<Shape<Int<kConsumerWarpGroups>, _1, _1>>; // warpgroups stacked
    static constexpr int kKeysPerWarpGroup = kBlockN / kConsumerWarpGroups;     // of S, dP
    static constexpr int kColsPerWarpGroup = kHeadDim / kConsumerWarpGroups;    // of dQ
    static_assert(kKeysPerWarpGroup % 8 == 0, "wgmma's N, and K's 8-row swizzle atoms");
    // S = Q K^T and dP = dO V^T: (queries x keys), each consumer kKeysPerWarpGroup keys. The
    // contraction (kHeadDim, resp. kHeadDimV) is the operands' K mode, not part of the type.
    using TiledMmaSdP = decltype(make_tiled_mma(
        GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kKeysPerWarpGroup>, Int<kHeadDim>>>(), AlongN{}));
    static_assert(std::is_same_v<TiledMmaSdP, decltype(make_tiled_mma(GMMA::ss_op_selector<Element, Element, float,
                                                                      Shape<_64, Int<kKeysPerWarpGroup>, Int<kHeadDimV>>>(),
                                                                      AlongN{}))>,
                  "one TiledMma serves S and dP");
    // dK^T += Q^T dS (head dim x keys), dV^T += dO^T P: every operand MN-major; split by the head dim
    // (AlongM: 64-row M-blocks alternating between the consumers) or by the keys (AlongN).
    using TiledMmaKV = decltype(make_tiled_mma(
        GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kDkvByHeadDim ? kBlockN : kKeysPerWarpGroup>, Int<kBlockM>>,
                             GMMA::Major::MN, GMMA::Major::MN>(),
        std::conditional_t<kDkvByHeadDim, AlongM, AlongN>{}));
    using TiledMmaDk = TiledMmaKV;
    using TiledMmaDv = TiledMmaKV;
    // The accumulators' (rows, columns): (head dim, keys).
    template <int kDim>
    using DkvShape = Shape<Int<kDim>, Int<kBlockN>>;
    // dQ = dS K: (queries x head dim), each consumer kColsPerWarpGroup columns; with staged dQ in two
    // halves of kColsPerWarpGroup / 2, one warpgroup's product each (kDqHalves; the consumer picks its
    // column block of K^T).
    static constexpr int kDqHalves = kDkvByHeadDim ? 2 : 1; // (= kDqStaged, below)
    static constexpr int kDqCols = kColsPerWarpGroup / kDqHalves; // of one dQ product
    using OneWarpGroup = Layout<Shape<_1, _1, _1>>;
    using TiledMmaDq = decltype(make_tiled_mma(
        GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kDqCols>, Int<kBlockN>>, GMMA::Major::K,
                             GMMA::Major::MN>(),
        std::conditional_t<kDqHalves == 1, AlongN, OneWarpGroup>{}));
    static_assert(kBlockM == 64, "one wgmma M extent (64) for the rows of S, dP and dQ");

    // Shared memory in wgmma's canonical swizzled layouts. An MN-major operand that a warpgroup reads
    // only part of must be cut at whole swizzle atoms (of 64 elements of its MN extent with 128-byte
    // rows, 32 with 64-byte rows, 16 with 32-byte rows): Q^T and dO^T by the consumers' dK^T / dV^T
    // rows (split by head dim: 64-row blocks; by keys: whole), K^T by dQ's column blocks. So Q and K
    // take 128-byte rows where a dQ product's columns are a multiple of 64 (d256: 64), else 64-byte
    // rows (192: 96 = 3 x 32); dO and V 128-byte rows at d_v 256 and 128. The K-major cuts (K by the
    // consumers' keys for S, V for dP) fall on 8-row atom boundaries. P / dS: dQ reads them K-major
    // across all keys, dK^T / dV^T as an MN-major B across all keys (split by head dim) or each
    // consumer's (by keys); 80 keys or 48 are whole 16-key atoms only: 32-byte rows.
    template <int kCols>
    using SmemAtomFor = std::conditional_t<kCols % 64 == 0, GMMA::Layout_K_SW128_Atom<Element>,
                                           std::conditional_t<kCols % 32 == 0, GMMA::Layout_K_SW64_Atom<Element>,
                                                              GMMA::Layout_K_SW32_Atom<Element>>>;
    using SmemAtomQK = SmemAtomFor<kDqCols>;
    using SmemAtomVdO = SmemAtomFor<kHeadDimV / kConsumerWarpGroups>;
    using SmemAtom = SmemAtomFor<kDkvByHeadDim ? kBlockN : kKeysPerWarpGroup>; // P / dS
    static constexpr int kAtomColsQK = decltype(size<1>(SmemAtomQK{}))::value;
    static constexpr int kAtomColsVdO = decltype(size<1>(SmemAtomVdO{}))::value;
    static constexpr int kAtomRows = decltype(size<0>(SmemAtom{}))::value;
    static_assert(kDqCols % kAtomColsQK == 0 && (kHeadDimV / kConsumerWarpGroups) % kAtomColsVdO == 0,
                  "each consumer's head-dim columns span whole atoms");
    static_assert(!kDkvByHeadDim || (kAtomColsQK == 64 && kAtomColsVdO == 64),
                  "the consumers' 64-row blocks of dK^T, dV^T: whole atoms of Q^T, dO^T");
    static_assert(kKeysPerWarpGroup % kAtomRows == 0, "each consumer's keys of K / V span whole atoms");
    static_assert((kDkvByHeadDim ? kBlockN : kKeysPerWarpGroup) % decltype(size<1>(SmemAtom{}))::value == 0,
                  "the keys that dK^T / dV^T read of P / dS: whole atoms");
    using SmemLayoutQ = decltype(tile_to_shape(SmemAtomQK{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    using SmemLayoutDo = decltype(tile_to_shape(SmemAtomVdO{}, Shape<Int<kBlockM>, Int<kHeadDimV>>{}));
    using SmemLayoutK = decltype(tile_to_shape(SmemAtomQK{}, Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    using SmemLayoutV = decltype(tile_to_shape(SmemAtomVdO{}, Shape<Int<kBlockN>, Int<kHeadDimV>>{}));
    // Q and dO by TMA: one box per atom column (its swizzle: host/tensor_maps.h).
    static constexpr int kQBoxCols = kAtomColsQK;
    static constexpr int kDoBoxCols = kAtomColsVdO;
    static constexpr int kKBoxCols = kAtomColsQK; // K and V by TMA: their atoms are Q's and dO's
    static constexpr int kVBoxCols = kAtomColsVdO;
    // (head dim, rows) views of the same bytes: Q^T, dO^T (A of dK^T, dV^T) and K^T (B of dQ).
    using SmemLayoutQt = decltype(composition(SmemLayoutQ{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockM>>{}, GenRowMajor{})));
    using SmemLayoutDot = decltype(composition(SmemLayoutDo{},
                                               make_layout(Shape<Int<kHeadDimV>, Int<kBlockM>>{}, GenRowMajor{})));
    using SmemLayoutKt = decltype(composition(SmemLayoutK{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
    // P and dS (queries x keys), keys contiguous: the accumulators hold neighbouring keys in register
    // pairs, stored by stmatrix; dQ reads dS as a K-major A, dV^T / dK^T read the (keys, queries)
    // view as an MN-major B.
    using SmemLayoutPdS = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
    using SmemLayoutPdSt = decltype(composition(SmemLayoutPdS{},
                                                make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, GenRowMajor{})));

    static constexpr int kSmemQElems = cosize(SmemLayoutQ{});
    static constexpr int kSmemDoElems = cosize(SmemLayoutDo{});
    static constexpr int kSmemKElems = cosize(SmemLayoutK{});
    static constexpr int kSmemVElems = cosize(SmemLayoutV{});
    static constexpr int kSmemPdSElems = cosize(SmemLayoutPdS{});
    static constexpr int kPdSBuffers = 1;
    // P then dS (bwd_sm90_common.cuh's carve-up puts them after V).
    static constexpr int kSmemScoreElems = 2 * kPdSBuffers * kSmemPdSElems;
    static constexpr int kSmemRowStatsBytes = 2 * kQStages * kBlockM * int(sizeof(float));

    // dQ of one query block leaves in fp32 through shared memory, added to the scratch by the
    // producer. Where its 64 x (d + 8) buffer fits beside two Q and dO stages, the consumers hand it
    // over there (bwd_kernel_sm90.cuh's hand-off, rows padded by 8 floats): 192 / 128, Q 2 x 24 KB +
    // dO 2 x 16 KB + K 36 KB + V 24 KB + P, dS 2 x 12 KB + lse/dsum 1 KB + dQ 64 x 200 x 4 = 50 KB +
    // 72 B = 220,232 B. At d256 the 66 KB buffer does not fit beside tiles of 80 keys (Q 2 x 32 KB
    // + dO 2 x 32 KB + K, V 2 x 40 KB + P, dS 20 KB: 228 KB before it, of the 227 KB an sm_90 CTA may
    // use). There dO has one stage (kDoStages, FlashAttention-3's choice; the producer loads the next
    // block's once both consumers' dV, its only reader after dP, have completed) and each consumer
    // stages its 64 x 128 fp32 of dQ (kDqStaged), four boxes of 32 columns: the first half (its first
    // dQ product) in a region of 24 KB shared by both consumers, consumer 1's second box over the P
    // buffer (P is free once every dV has completed), the second half over its own column blocks of
    // the Q stage (only its dK^T reads them after S). The producer adds them with bulk tensor
    // reductions (bwd_kernel_sm90_pds.cuh says when each part is free): Q 2 x 32 KB + dO 32 KB + K, V
    // 2 x 40 KB + P, dS 20 KB + region 24 KB + lse/dsum 1 KB + 104 B = 226,408 B.
    static constexpr int kDqRowStride = kHeadDim + 8;
    static constexpr int kSmemDqHandoffBytes = kBlockM * kDqRowStride * int(sizeof(float));
    static constexpr int kDqBoxCols = 32;
    static constexpr int kDqBoxBytes = kDqBoxCols * kBlockM * int(sizeof(float));
    static constexpr int kDqBoxes = kColsPerWarpGroup / kDqBoxCols; // a consumer's
    static constexpr bool kDqTransposed = false; // bwd_sm90_common.cuh's hand-off: (query, column) registers
    // The tiles with do_stages of dO (bwd_sm90_common.cuh's carve-up).
    static constexpr int tile_bytes(int do_stages) {
        return (kQStages * kSmemQElems + do_stages * kSmemDoElems + kSmemKElems + kSmemVElems + kSmemScoreElems) *
               int(sizeof(Element));
    }
    static constexpr bool kDqHandoff =
        tile_bytes(kQStages) + kSmemRowStatsBytes + kSmemDqHandoffBytes + (2 * kQStages + 5) * 8 <= 227 * 1024;
    static constexpr bool kDqStaged = !kDqHandoff;
    static constexpr int kDoStages = kDqStaged ? 1 : kQStages;
    static constexpr int kSmemTileBytes = tile_bytes(kDoStages);
    // The staged dQ's region: the boxes that the P buffer does not hold.
    static constexpr int kDqRegionBoxes = kConsumerWarpGroups * kDqBoxes / 2 - 1;
    // Where box b (columns 32 b .. 32 b + 31 of consumer c's kColsPerWarpGroup) of a staged block
    // lies: boxes 0, 1 (the consumer's first dQ product) in the region (`in` kDqInRegion, `bytes` from
    // its start), the last region box over the P buffer (kDqInP); boxes 2, 3 (its second) over its
    // 64-column blocks of the Q stage, c and c + 2 (kDqInQStage, bytes from the stage's start): the
    // rows of its dK^T (the tiled wgmma's M-blocks alternate between the consumers), which only its
    // dK^T reads after S. (Sm90BwdSmem::staged_dq_box turns it into an address.)
    enum DqBoxIn { kDqInRegion, kDqInP, kDqInQStage };
    struct DqBoxPlace {
        DqBoxIn in;
        int bytes;
    };
    __host__ __device__ static constexpr DqBoxPlace staged_dq_box(int c, int b) {
        constexpr int kHalf = kDqBoxes / 2;
        if (b >= kHalf)
            return {kDqInQStage, (c + kConsumerWarpGroups * (b - kHalf)) * kBlockM * kAtomColsQK * int(sizeof(Element))};
        const int r = c * kHalf + b;
        return r < kDqRegionBoxes ? DqBoxPlace{kDqInRegion, r * kDqBoxBytes} : DqBoxPlace{kDqInP, 0};
    }
    static constexpr int kSmemDqBytes = kDqHandoff ? kSmemDqHandoffBytes : kDqRegionBoxes * kDqBoxBytes;
    static_assert(!kDqStaged || (kDkvByHeadDim && kDqHalves == 2 && kHeadDimV == kHeadDim && kDqBoxes == 4 &&
                                 kSmemPdSElems * int(sizeof(Element)) >= kDqBoxBytes &&
                                 kSmemQElems * int(sizeof(Element)) == 2 * kConsumerWarpGroups * kDqBoxBytes),
                  "staged dQ: two 64-column products a consumer, the first in the region (one box in P), the "
                  "second over its two 64-column blocks of the Q stage, one box each");
    static_assert(kDqStaged == kDkvByHeadDim, "the Q stage's halves are free for dQ where each consumer's dK^T reads its own");
    // q_full, q_empty per stage; kv_full, kv_empty; dq_full[2] (staged: dq_staged), dq_empty; with
    // staged dQ do_full, do_empty, extra_read, dq_region_staged.
    static constexpr int kBarriers = 2 * kQStages + 5 + (kDqStaged ? 4 : 0);
    static constexpr int kSmemBytes = kSmemTileBytes + kSmemRowStatsBytes + kSmemDqBytes + kBarriers * 8;
    static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB of shared memory");
    static_assert(kHeadDim != 256 || (kSmemBytes == 226408 && kDqStaged), "the budget written above");
    static_assert(!(kHeadDim == 192 && kHeadDimV == 128) || (kSmemBytes == 220232 && kDqHandoff), "the budget written above");

    // Registers per thread after setmaxnreg (see Sm90BwdTraits), producer / consumers, each split
    // summing to 168 x 384. d256: 24 / 240 (the consumers' peak is 200 accumulators). 192 / 128: the
    // consumers' peak is 168 accumulators, and the producer also runs the dQ hand-off's reductions
    // and two TMA loops (Q in 32-column boxes, dO in 64-column ones); ptxas -v, bf16, spill stores /
    // loads of the plain kernel: 24 / 240 176 / 176 B, 56 / 224 232 / 284 B, all of the latter in the
    // consumers' set-up before the loop and their epilogue (none in the producer or the loop; the
    // extras kernel 344 / 500 B, the same places). With 64-key blocks 56 / 224 spilled nothing.
    static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
    static constexpr int kProducerRegs = kDqHandoff ? 56 : 24;
    static constexpr int kConsumerRegs = kDqHandoff ? 224 : 240;
    static_assert(kProducerThreads * kProducerRegs + kConsumerThreads * kConsumerRegs <= kThreads * kLaunchRegs,
                  "setmaxnreg cannot hand out more registers than the CTA launched with");

    static_assert(2 * kBlockM == kProducerThreads, "one producer thread per lse / dsum value of a stage");
};

// The dQ hand-off buffer of a schedule with Traits::kDqHandoff in the ordered dQ's layout
// (sm90_bwd_hand_off_dq): kHeadDim / kDqBoxCols boxes of 32 fp32 columns by kBlockM rows, a row's 128 bytes in the 128-byte swizzle (its 16-byte chunk c at
// c ^ (row % 8)), as the boxes of params.dq_map (host/tensor_maps.h) that the producer's bulk tensor
// reductions read. offset: the byte offset of (row, col). A consumer thread's form: from its first
// register's (row0, col0), the offset of a register (dr, dc) away; it equals offset(row0 + dr,
// col0 + dc) where dc % 4 == 0 and the offsets add to row0 % 8 and to col0's chunk bits without a
// carry (tests/gpu/bwd_layout_check.cu checks every thread of the accumulators' layouts), and with
// dr, dc known to ptxas it takes a base per distinct chunk constant and immediates for the rest.
template <typename Traits>
struct Sm90BwdDqBoxes {
    static constexpr int kBoxCols = Traits::kDqBoxCols;
    static_assert(kBoxCols * 4 == 128, "a box row is one 128-byte swizzle row");
    static_assert(Traits::kHeadDim / kBoxCols * Traits::kDqBoxBytes <= Traits::kSmemDqBytes, "the boxes fit the buffer");
    __host__ __device__ static constexpr uint32_t offset(int row, int col) {
        return uint32_t((col / kBoxCols) * Traits::kDqBoxBytes + row * 128 + ((((col % kBoxCols) / 4) ^ (row % 8)) * 16) +
                        (col % 4) * 4);
    }
    uint32_t first; // offset of (row0, col0) without its chunk
    int chunk0;     // its swizzled chunk
    __host__ __device__ Sm90BwdDqBoxes(int row0, int col0)
        : first(uint32_t((col0 / kBoxCols) * Traits::kDqBoxBytes + row0 * 128 + (col0 % 4) * 4)),
          chunk0(((col0 % kBoxCols) / 4) ^ (row0 % 8)) {}
    __host__ __device__ uint32_t at(int dr, int dc) const {
        return first + uint32_t((dc / kBoxCols) * Traits::kDqBoxBytes + dr * 128 +
                                ((chunk0 ^ ((dc % kBoxCols) / 4) ^ (dr % 8)) * 16));
    }
};

// The producer warpgroup's roles. With the ordered dQ, and wherever dQ is staged in the Q/dO stage
// (kDqStaged), its warps split: the first half loads (thread 0 issues the TMA copies, loader r the
// lse and dsum values of rows r, r + 64, ... of each stage) and the second adds dQ in its order
// (thread r of it rows r, r + 64, ... from the hand-off; the first thread of it the staged boxes).
// Staged, a stage is refilled only after its reductions have read it, so in one loop the load of
// block u+1 waited behind the adds of block u-1 (H200, d256, against per-thread adds from the
// registers: 1.00-1.05x in one loop, 1.16-1.26x split). In one loop that does both, the adds of
// block u-1, which wait for the block's turn and then for their writes to land, held back the loads
// of block u+1, and the consumers starved on them (H200, d128 1k: 12% of the ordered kernel's warp
// samples at a stage's q_full, 1% without the order; the kernel 1.41x the default's time). Without
// the order every producer thread does both: its adds never wait for another CTA. K and V, loaded
// once (the ordered dQ's CTA has one key block), come from every producer thread either way.
// With the ordered dQ and the hand-off the two dQ warps take the blocks by turns (block u: warp
// u % 2, its first lane issuing the block's bulk tensor reductions): a block's link is the turn,
// the reductions' reads, the buffer's release, then the wait for their writes and the release fence
// before the count. With both warps on every block (a row's reduction per thread) that link held the
// next block's reductions and the consumers waited at the buffer (H200, d128 MHA 1k with the turns
// taken away: ordered / default kernel time 0.81, and 0.98 without the count's completion wait,
// fence and add; docs/perf-log.md, "Where the ordered dQ's cost lies"); by turns, one block's
// completion and fence run while the other warp takes the next block.
template <typename Traits, bool kOrderedDq>
struct Sm90BwdProducerRoles {
    static constexpr bool kSplit = kOrderedDq || Traits::kDqStaged;
    static constexpr int kLoaders = kSplit ? Traits::kProducerThreads / 2 : Traits::kProducerThreads;
    static constexpr int kDqThreads = kSplit ? Traits::kProducerThreads - kLoaders : Traits::kProducerThreads;
    static_assert(kLoaders % 32 == 0 && kDqThreads % 32 == 0, "roles and counting warps are whole warps");
    static constexpr bool kDqWarpsAlternate = kOrderedDq && Traits::kDqHandoff;
    static_assert(!kDqWarpsAlternate || kDqThreads == 64, "two dQ warps take the blocks in turn");
    // Threads that add one block's dQ (and arrive on dq_empty for it).
    static constexpr int kBlockDqThreads = kDqWarpsAlternate ? 32 : kDqThreads;
};

// The Hopper backward of a tile head dim and value head dim (tiles.h's backward_sm90_pds_schedule
// picks the schedule).
template <int kHeadDim, typename Element, int kHeadDimV = kHeadDim>
using Sm90BwdTraitsFor = std::conditional_t<tiles::backward_sm90_pds_schedule(kHeadDim, kHeadDimV),
                                            Sm90BwdPdSTraits<kHeadDim, Element, kHeadDimV>,
                                            Sm90BwdTraits<kHeadDim, Element>>;

} // namespace flashattn::cuda::kernels
