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
//                                               computes half of dQ's columns
// Per consumer thread at d128: dK, dV 64 + 64 fp32 registers, S^T, dP^T 32 + 32, dQ 32.
#pragma once

#include "kernels/kernel_code.h"
#include "kernels/tiles.h"

#if FLASHATTN_KERNEL_CODE
#include <cute/atom/mma_traits_sm90_gmma.hpp>
#include <cute/tensor.hpp>
#endif
#include <cutlass/numeric_types.h>

#include <type_traits>

namespace flashattn::cuda::kernels {

using namespace cute;

template <int kHeadDim_, typename Element_>
struct Sm90BwdTraits {
    using Element = Element_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr int kConsumerWarpGroups = 2;
    static constexpr int kBlockN = 64 * kConsumerWarpGroups; // keys: 64 per consumer warpgroup
    static constexpr int kBlockM = tiles::kBackwardSm90BlockM; // queries per Q/dO stage (64)
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

    // dQ's columns per consumer warpgroup (its product: TiledMmaDq below).
    static constexpr int kDqColsPerWarpGroup = kHeadDim / kConsumerWarpGroups;

    // Shared memory, in elements of wgmma's canonical swizzled layouts (below: tiles of whole 8-row
    // atoms, so that a tile's cosize is its size, checked there). Q and dO arrive by TMA
    // (bwd_params_sm90.cuh): one box per atom column, kBlockM rows of 128 bytes.
    static constexpr int kSmemQElems = kBlockM * kHeadDim;
    static constexpr int kSmemKVElems = kBlockN * kHeadDim;
    static constexpr int kSmemdSElems = kBlockM * kBlockN;
    static constexpr int kQBoxCols = 128 / int(sizeof(Element));
    static constexpr int kSmemScoreElems = kDsBuffers * kSmemdSElems; // bwd_sm90_common.cuh's carve-up
    // Q[stages], dO[stages], K, V, dS[buffers] (1024-byte aligned each: whole swizzle periods),
    // then lse[stages][kBlockM], dsum[stages][kBlockM] in fp32, then the mbarriers.
    static constexpr int kSmemTileBytes =
        (2 * kQStages * kSmemQElems + 2 * kSmemKVElems + kDsBuffers * kSmemdSElems) * int(sizeof(Element));
    static constexpr int kSmemRowStatsBytes = 2 * kQStages * kBlockM * int(sizeof(float));
    // dQ of one query block in fp32, handed from the consumers to the producer warpgroup, which adds
    // it to the global scratch (a bulk reduction per row; red.global.add.v4 where a CTA revisits
    // rows, bwd_sm90_common.cuh) while the consumers go on. Rows padded by 8 floats: the consumers'
    // float2 stores (8 rows x 4 column pairs per warp) then fill all 32 banks in two wavefronts; a
    // row stays contiguous and 16-byte aligned (544 bytes apart at d128), as a bulk copy needs.
    static constexpr bool kDqHandoff = true;
    static constexpr int kDqRowStride = kHeadDim + 8;
    static constexpr int kSmemDqBytes = kBlockM * kDqRowStride * int(sizeof(float));
    static constexpr int kDqChunksPerRow = kHeadDim / 4; // float4 chunks
    static_assert((kBlockM * kDqChunksPerRow) % kProducerThreads == 0);
    // q_full, q_empty per stage; kv_full, kv_empty; dq_full, dq_empty.
    static constexpr int kBarriers = 2 * kQStages + 4;
    static constexpr int kSmemBytes = kSmemTileBytes + kSmemRowStatsBytes + kSmemDqBytes + kBarriers * 8;
    static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB of shared memory");

    // Registers per thread after setmaxnreg. The CTA launches with ptxas's count for 384 threads
    // (168: the largest multiple of 8 that fits 64K) and setmaxnreg only moves registers between its
    // warpgroups, so the split must fit 384 x 168: a larger sum would leave the consumers' increase
    // waiting forever. ptxas -v of the plain bf16 kernel, spill stores (consumers alone): d128 24/240
    // 812 B (128), 40/232 620 B (164); d64 80/208 0 B. The producer's spills are the addresses of its
    // tile copies, off the tensor cores' path; the consumers' are not, so d128 takes 24/240 (as
    // FlashAttention-3).
    static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
    static constexpr int kProducerRegs = kHeadDim <= 64 ? 80 : 24;
    static constexpr int kConsumerRegs = kHeadDim <= 64 ? 208 : 240;
    static_assert(kProducerThreads * kProducerRegs + kConsumerThreads * kConsumerRegs <= kThreads * kLaunchRegs,
                  "setmaxnreg cannot hand out more registers than the CTA launched with");

    static_assert(2 * kBlockM == kProducerThreads, "one producer thread per lse / dsum value of a stage");

#if FLASHATTN_KERNEL_CODE
    using AlongM = Layout<Shape<Int<kConsumerWarpGroups>, _1, _1>>; // warpgroups stacked along keys
    using AlongN = Layout<Shape<_1, Int<kConsumerWarpGroups>, _1>>; // warpgroups side by side (dQ columns)
    // S^T = K Q^T and dP^T = V dO^T.
    using TiledMmaSdP = decltype(make_tiled_mma(
        GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kBlockM>, Int<kHeadDim>>>(), AlongM{}));
    // dV += P^T dO and dK += dS^T Q.
    using TiledMmaKV = decltype(make_tiled_mma(
        GMMA::rs_op_selector<Element, Element, float, Shape<_64, Int<kHeadDim>, Int<kBlockM>>, GMMA::Major::K,
                             GMMA::Major::MN>(),
        AlongM{}));
    // dQ = dS K: (queries x kDqColsPerWarpGroup) per warpgroup, reduced over all kBlockN keys.
    using TiledMmaDq = decltype(make_tiled_mma(
        GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kDqColsPerWarpGroup>, Int<kBlockN>>,
                             GMMA::Major::MN, GMMA::Major::MN>(),
        AlongN{}));

    // Shared memory in wgmma's canonical swizzled layouts, 128-byte rows. An MN-major operand that a
    // warpgroup reads only part of must be cut at whole swizzle atoms: K^T is cut into the two
    // consumers' dQ column halves, so at d64 (32 columns each) K and V use 64-byte rows.
    using SmemAtomQ = GMMA::Layout_K_SW128_Atom<Element>;
    using SmemAtomKV = std::conditional_t<kDqColsPerWarpGroup % 64 == 0, GMMA::Layout_K_SW128_Atom<Element>,
                                          GMMA::Layout_K_SW64_Atom<Element>>;
    static_assert(kDqColsPerWarpGroup % decltype(size<1>(SmemAtomKV{}))::value == 0,
                  "each consumer's dQ columns of K^T span whole swizzle atoms");
    static_assert(kHeadDim % decltype(size<1>(SmemAtomQ{}))::value == 0);
    using SmemLayoutQ = decltype(tile_to_shape(SmemAtomQ{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));   // Q, dO
    using SmemLayoutKV = decltype(tile_to_shape(SmemAtomKV{}, Shape<Int<kBlockN>, Int<kHeadDim>>{})); // K, V
    // (head dim, rows) views of the same bytes: Q^T, dO^T (B of dK, dV) and K^T (B of dQ).
    using SmemLayoutQt = decltype(composition(SmemLayoutQ{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockM>>{}, GenRowMajor{})));
    using SmemLayoutKt = decltype(composition(SmemLayoutKV{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
    // dS (queries x keys), queries contiguous: the consumers hold dS^T with neighbouring queries in
    // register pairs, so the MN-major layout takes them as 4-byte stores; dQ reads it as an MN-major A.
    using SmemLayoutdS = decltype(tile_to_shape(GMMA::Layout_MN_SW128_Atom<Element>{},
                                                Shape<Int<kBlockM>, Int<kBlockN>>{}));
    // The (keys, queries) view the consumers write dS^T through.
    using SmemLayoutdSt = decltype(composition(SmemLayoutdS{},
                                               make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, GenRowMajor{})));
    static_assert(cosize(SmemLayoutQ{}) == kSmemQElems && cosize(SmemLayoutKV{}) == kSmemKVElems &&
                      cosize(SmemLayoutdS{}) == kSmemdSElems,
                  "the tiles are whole atoms");
    static_assert(decltype(size<1>(SmemAtomQ{}))::value == kQBoxCols, "Q's atom rows are 128 bytes");
#endif
};

// The d256 schedule (bwd_kernel_sm90_pds.cuh; FlashAttention-3's for its largest head dim, reasoned
// here): 64 queries x 64 keys per block, the same 384 threads. The keys-as-rows schedule above keeps
// 64 keys x the whole head dim of dK and of dV in each consumer's registers, 256 fp32 per thread at
// d256: more than a thread may have. So the head dim is what the consumers split for the three
// products that carry it, and P / dS go through shared memory to get there:
//   S  = Q K^T, dP = dO V^T  (queries x keys)    SS, each consumer 32 of the 64 keys with the
//                                                whole d = 256 contraction (no redundant work);
//                                                queries as rows, so lse / dsum are per row and the
//                                                policies see the accumulators directly
//   P, dS -> shared memory (16-bit, keys contiguous), each consumer its 32 keys; a named barrier
//   dV += P^T dO             (keys x head dim)   SS, each consumer 64 keys x 128 columns: A = P^T
//   dK += dS^T Q             (keys x head dim)   (MN-major view of P), B = dO^T / Q^T (MN-major)
//   dQ  = dS K               (queries x head dim) SS, each consumer 128 columns: A = dS (K-major),
//                                                B = K^T (MN-major)
// Per consumer thread: dK 64 + dV 64 + dQ 64 + S 16 + dP 16 fp32 registers, and S / dP are dead
// before dQ is live (P and dS live in shared memory by then): a peak of 192 accumulators.
template <int kHeadDim_, typename Element_>
struct Sm90BwdPdSTraits {
    using Element = Element_;
    static constexpr int kHeadDim = kHeadDim_;
    static constexpr bool kPdSSchedule = true; // bwd_kernel_sm90_pds.cuh
    static constexpr int kConsumerWarpGroups = 2;
    static constexpr int kBlockN = 64; // keys per key block
    static constexpr int kBlockM = tiles::kBackwardSm90BlockM; // queries per Q/dO stage (64)
    static constexpr int kConsumerThreads = 128 * kConsumerWarpGroups;
    static constexpr int kProducerThreads = 128;
    static constexpr int kThreads = kConsumerThreads + kProducerThreads;
    // Q/dO/lse/dsum stages in flight: two, so that block m+1's 64 KB of Q and dO land while block m
    // computes (one stage would leave the tensor cores idle for that copy on every block). Shared
    // memory then has no room for the 64 KB dQ hand-off buffer (see kSmemBytes below), so each
    // consumer adds its dQ half to the scratch itself (kDqHandoff = false).
    static constexpr int kQStages = 2;
    // P and dS are written for block m while the other consumer's dV/dK/dQ of block m-1 may still
    // read them: two buffers (the argument of bwd_kernel_sm90.cuh's dS double buffer).
    static constexpr int kPdSBuffers = 2;

    static_assert(std::is_same_v<Element, cutlass::half_t> || std::is_same_v<Element, cutlass::bfloat16_t>);
    static_assert(tiles::backward_sm90_has(kHeadDim) && tiles::backward_sm90_pds_schedule(kHeadDim), "see tiles.h");
    // The planner plans deterministic chunks with the mma.sync kernel's key blocks.
    static_assert(kBlockN == tiles::backward(kHeadDim).block_n);
    static_assert(kHeadDim % (64 * kConsumerWarpGroups) == 0);

    static constexpr int kKeysPerWarpGroup = kBlockN / kConsumerWarpGroups;     // of S, dP
    static constexpr int kColsPerWarpGroup = kHeadDim / kConsumerWarpGroups;    // of dK, dV, dQ

    // Shared memory, in elements of wgmma's canonical swizzled layouts (below: tiles of whole 8-row
    // atoms of 128-byte rows, so that a tile's cosize is its size, checked there). Q and dO arrive by
    // TMA (bwd_params_sm90.cuh): one box per atom column.
    static constexpr int kSmemQElems = kBlockM * kHeadDim;
    static constexpr int kSmemKVElems = kBlockN * kHeadDim;
    static constexpr int kSmemPdSElems = kBlockM * kBlockN;
    static constexpr int kQBoxCols = 128 / int(sizeof(Element));
    // P[buffers] then dS[buffers] (bwd_sm90_common.cuh's carve-up puts them after V).
    static constexpr int kSmemScoreElems = 2 * kPdSBuffers * kSmemPdSElems;
    static constexpr int kSmemTileBytes =
        (2 * kQStages * kSmemQElems + 2 * kSmemKVElems + kSmemScoreElems) * int(sizeof(Element));
    static constexpr int kSmemRowStatsBytes = 2 * kQStages * kBlockM * int(sizeof(float));
    static constexpr bool kDqHandoff = false;
    static constexpr int kSmemDqBytes = 0;
    static constexpr int kBarriers = 2 * kQStages + 4;
    // d256, 16-bit: Q 2 x 32 KB + dO 2 x 32 KB + K 32 KB + V 32 KB + P 2 x 8 KB + dS 2 x 8 KB
    // = 224 KB, + lse/dsum 1 KB + 64 B of mbarriers = 230,464 B of the 232,448 an sm_90 CTA may use.
    // A dQ hand-off buffer (64 x 256 fp32 = 64 KB) would only fit with one Q and one dO stage
    // (210 KB): the alternative this schedule did not take (see kQStages).
    static constexpr int kSmemBytes = kSmemTileBytes + kSmemRowStatsBytes + kSmemDqBytes + kBarriers * 8;
    static_assert(kSmemBytes <= 227 * 1024, "an sm_90 CTA has at most 227 KB of shared memory");
    static_assert(kHeadDim != 256 || kSmemBytes == 230464, "the budget written above");

    // Registers per thread after setmaxnreg (see Sm90BwdTraits): 24 for the producer, 240 for the
    // consumers, 24 x 128 + 240 x 256 = 168 x 384.
    static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
    static constexpr int kProducerRegs = 24;
    static constexpr int kConsumerRegs = 240;
    static_assert(kProducerThreads * kProducerRegs + kConsumerThreads * kConsumerRegs <= kThreads * kLaunchRegs,
                  "setmaxnreg cannot hand out more registers than the CTA launched with");

    static_assert(2 * kBlockM == kProducerThreads, "one producer thread per lse / dsum value of a stage");

#if FLASHATTN_KERNEL_CODE
    using AlongN = Layout<Shape<_1, Int<kConsumerWarpGroups>, _1>>; // warpgroups side by side
    // S = Q K^T and dP = dO V^T: (queries x keys), each consumer kKeysPerWarpGroup keys.
    using TiledMmaSdP = decltype(make_tiled_mma(
        GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kKeysPerWarpGroup>, Int<kHeadDim>>>(), AlongN{}));
    // dV += P^T dO and dK += dS^T Q: (keys x head dim), each consumer kColsPerWarpGroup columns.
    using TiledMmaKV = decltype(make_tiled_mma(
        GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kColsPerWarpGroup>, Int<kBlockM>>,
                             GMMA::Major::MN, GMMA::Major::MN>(),
        AlongN{}));
    // dQ = dS K: (queries x head dim), each consumer kColsPerWarpGroup columns.
    using TiledMmaDq = decltype(make_tiled_mma(
        GMMA::ss_op_selector<Element, Element, float, Shape<_64, Int<kColsPerWarpGroup>, Int<kBlockN>>,
                             GMMA::Major::K, GMMA::Major::MN>(),
        AlongN{}));
    static_assert(kBlockM == 64 && kBlockN == 64, "one wgmma M extent (64) for every product's rows");

    // Shared memory in wgmma's canonical swizzled layouts, 128-byte rows everywhere. An MN-major
    // operand that a warpgroup reads only part of must be cut at whole swizzle atoms (64 elements of
    // its MN extent with 128-byte rows): Q^T, dO^T and K^T are cut into the consumers' 128-column
    // halves (two atoms each). The K-major cuts (K by 32-key halves for S, V for dP) fall on 8-row
    // atom boundaries. P / dS are read whole by both consumers.
    using SmemAtom = GMMA::Layout_K_SW128_Atom<Element>;
    static constexpr int kAtomCols = decltype(size<1>(SmemAtom{}))::value;
    static constexpr int kAtomRows = decltype(size<0>(SmemAtom{}))::value;
    static_assert(kColsPerWarpGroup % kAtomCols == 0, "each consumer's head-dim columns span whole atoms");
    static_assert(kKeysPerWarpGroup % kAtomRows == 0, "each consumer's keys of K / V span whole atoms");
    static_assert(kBlockN == kAtomCols, "P / dS rows: one 128-byte swizzle row of keys");
    using SmemLayoutQ = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kHeadDim>>{}));   // Q, dO
    using SmemLayoutKV = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockN>, Int<kHeadDim>>{})); // K, V
    // (head dim, rows) views of the same bytes: Q^T, dO^T (B of dK, dV) and K^T (B of dQ).
    using SmemLayoutQt = decltype(composition(SmemLayoutQ{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockM>>{}, GenRowMajor{})));
    using SmemLayoutKt = decltype(composition(SmemLayoutKV{},
                                              make_layout(Shape<Int<kHeadDim>, Int<kBlockN>>{}, GenRowMajor{})));
    // P and dS (queries x keys), keys contiguous: the accumulators hold neighbouring keys in register
    // pairs (4-byte stores; a warp's 8 rows x 4 pairs fall in 8 different 16-byte chunks of the
    // swizzle: conflict-free); dQ reads dS as a K-major A, dV / dK read the (keys, queries) view as
    // an MN-major A.
    using SmemLayoutPdS = decltype(tile_to_shape(SmemAtom{}, Shape<Int<kBlockM>, Int<kBlockN>>{}));
    using SmemLayoutPdSt = decltype(composition(SmemLayoutPdS{},
                                                make_layout(Shape<Int<kBlockN>, Int<kBlockM>>{}, GenRowMajor{})));
    static_assert(cosize(SmemLayoutQ{}) == kSmemQElems && cosize(SmemLayoutKV{}) == kSmemKVElems &&
                      cosize(SmemLayoutPdS{}) == kSmemPdSElems,
                  "the tiles are whole atoms");
    static_assert(kAtomCols == kQBoxCols, "the atom's rows are 128 bytes");
#endif
};

// The Hopper backward of a tile head dim (tiles.h's backward_sm90_pds_schedule picks).
template <int kHeadDim, typename Element>
using Sm90BwdTraitsFor = std::conditional_t<tiles::backward_sm90_pds_schedule(kHeadDim), Sm90BwdPdSTraits<kHeadDim, Element>,
                                            Sm90BwdTraits<kHeadDim, Element>>;

} // namespace flashattn::cuda::kernels
