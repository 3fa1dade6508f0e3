// The Hopper (sm_90a) forward: FlashAttention-2's algorithm with wgmma products, scheduled
// FlashAttention-3's way (warp specialisation). Tiles and the CuTe objects: fwd_traits_sm90.cuh.
//
//   warpgroup 0 (producer)     Q once a tile (cp.async, or TMA from thread 32 at >= 8k keys:
//                              Sm90FwdParams::q_tma), then K[j] and V[j] into a ring of stages: by TMA
//                              from one thread where K and V are dense (kv_tensor_maps.cuh), else by
//                              cp.async from all 128; each stage's arrival is signalled on an mbarrier
//                              (TMA's byte count, or cp.async.mbarrier.arrive), its reuse waits for
//                              every consumer to release it (another mbarrier)
//   warpgroups 1.. (consumers) 64 query rows each, two (three at d <= 64, tiles.h): S = Q K^T,
//                              softmax, O += P V (wgmma), over the key blocks that its rows see;
//                              at d128 the plain kernel holds Q in registers for S
//
// Nothing in the main loop synchronises the whole CTA, so the consumers can drift apart, and a ring
// of named barriers makes them take turns ("ping-pong"): one issues its two products while the
// others run their softmax, so the tensor cores are busy during the exp2s (the softmax of one
// warpgroup is a third of its block time at d128; at d64 as long as another's products, so there
// a third consumer keeps the tensor cores fed).
//
// Persistent grid (kPersistent; else one tile per CTA, the loop's state folded away): a CTA computes
// tile blockIdx.x, then blockIdx.x + gridDim.x, ... or, with a tile counter (masked problems, whose
// tiles do unequal work), the next unclaimed tile each time it finishes one (the launcher makes the
// grid at most one CTA per SM), so the producer fetches the next tile's first K/V blocks while
// the consumers still normalise and store this tile's O, and the per-CTA start-up (launch, barrier
// set-up, register reconfiguration) is paid once per SM instead of once per tile. The stage
// counters run on across tiles. Each Q buffer has an mbarrier for each direction (q_full, q_empty),
// and every tile passes through both of its buffer's, also one without K/V blocks, so neither side
// can get two phases ahead. Where O has a buffer of its own (Sm90FwdTraits::kOwnOBuffer) the
// consumers release Q once their last S = Q K^T of the tile is done, and where two Q buffers fit
// beside it (kQBuffers, two consumers: d65-128) tile i + 1's Q loads into the other one while tile
// i runs; else O is staged in Q's buffer and Q is released after O's store.
//
// Memory model: the producer writes shared memory only with cp.async (zero-filling with a source
// size of 0 where rows or columns lie outside the tensor) or TMA (the hardware zero-fills outside
// the tensor map, which ends at seqlen_k and head_dim), so the mbarrier that tracks its copies
// covers every byte. A consumer that waited on a stage written by cp.async runs fence.proxy.async
// before its wgmma reads it (cp.async writes through the generic proxy, wgmma reads through the
// async proxy); TMA's writes are the async proxy's own and need none.
#pragma once

#include "kernels/fwd_args.h"
#include "kernels/forward_sm90/fwd_traits_sm90.cuh"
#include "kernels/forward_sm90/kv_tensor_maps.cuh"
#include "kernels/kernel_code.h"
#if FLASHATTN_KERNEL_CODE
#include "device/dependent_launch.h"
#include "device/online_softmax.cuh"
#include "device/producer_copies.cuh"
#include "device/score_policies.cuh"
#include "device/tile_ops.cuh"
#include "device/tile_order.cuh"
#include "device/tma_tiles.cuh"
#include "device/wgmma_ops.cuh"

#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#endif

namespace flashattn::cuda::kernels {

using namespace cute;

template <typename Traits, bool kExtras, bool kPersistent>
__global__ void __launch_bounds__(Traits::kCtaThreads, 1)
    fwd_kernel_sm90(const __grid_constant__ Sm90FwdParams params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const FwdArgs& args = params.args;
    const bool kv_tma = params.kv_tma, q_tma = params.q_tma;
    using Element = typename Traits::Element;
    constexpr int kBlockM = Traits::kBlockM;
    constexpr int kBlockN = Traits::kBlockN;
    constexpr int kHeadDim = Traits::kHeadDim, kHeadDimV = Traits::kHeadDimV;
    constexpr int kStages = Traits::kStages;
    static_assert(!kPersistent || Traits::kCanPersist, "see Sm90FwdTraits::kCanPersist");
    constexpr int kConsumerThreads = Traits::kThreads; // the consumer warpgroups
    // Warp-uniform (a broadcast from lane 0), so that what derives from it (a consumer's key
    // blocks, its loop bounds) stays in uniform registers.
    const int warpgroup = cutlass::canonical_warp_group_idx();
    const bool varlen = args.cu_seqlens_q != nullptr;

    // Shared memory: Q, kStages K blocks, kStages V blocks, O's buffer (or none: O in Q's), then
    // the barriers.
    extern __shared__ __align__(1024) char smem[];
    constexpr int kKElems = cosize(typename Traits::SmemLayoutK{});
    constexpr int kVElems = cosize(typename Traits::SmemLayoutV{});
    constexpr int kQElems = cosize(typename Traits::SmemLayoutQ{});
    constexpr int kOElems = cosize(typename Traits::SmemLayoutO{});
    constexpr int kQBuffers = Traits::kQBuffers;
    static_assert(kQBuffers <= 2, "the barrier block (Sm90FwdTraits::kBarrierBytes) has two q_full / q_empty slots");
    Element* smem_q = reinterpret_cast<Element*>(smem); // [kQBuffers]: tile i's Q in buffer i % kQBuffers
    Element* smem_k = smem_q + kQBuffers * kQElems;
    Element* smem_v = smem_k + kStages * kKElems;
    Element* smem_o = Traits::kOwnOBuffer ? smem_v + kStages * kVElems : smem_q;
    uint64_t* bar = reinterpret_cast<uint64_t*>(smem_v + kStages * kVElems + (Traits::kOwnOBuffer ? kOElems : 0));
    // K and V have separate rings, so a K stage is refilled as soon as S = Q K^T is done with it,
    // a full P V earlier than its V.
    uint64_t* q_full = bar;                     // [kQBuffers] Q landed (producer threads)
    uint64_t* q_empty = bar + 2;                // [kQBuffers] every consumer is done with Q's buffer
    uint64_t* k_full = bar + 4;                 // [kStages] K[j] landed
    uint64_t* v_full = bar + 4 + kStages;       // [kStages] V[j] landed
    uint64_t* k_empty = bar + 4 + 2 * kStages;  // [kStages] every consumer is done with K[j]
    uint64_t* v_empty = bar + 4 + 3 * kStages;  // [kStages] ... with V[j]
    uint64_t* tile_full = bar + 4 + 4 * kStages;  // [2] a claimed tile index published in its slot
    uint64_t* tile_empty = bar + 6 + 4 * kStages; // [2] every thread has read that slot
    unsigned* tile_slot = reinterpret_cast<unsigned*>(bar + 8 + 4 * kStages); // [2]
    // A tile's Q buffer, and the parity its barriers complete with (their uses so far: one a tile).
    auto q_buffer = [&](int tiles_done) { return tiles_done % kQBuffers; };
    auto q_parity = [&](int tiles_done) { return (tiles_done / kQBuffers) & 1; };
    auto q_tile = [&](int buffer) {
        return make_tensor(make_smem_ptr(smem_q + buffer * kQElems), typename Traits::SmemLayoutQ{});
    };
    auto k_stage = [&](int s) { return make_tensor(make_smem_ptr(smem_k + s * kKElems), typename Traits::SmemLayoutK{}); };
    auto vt_stage = [&](int s) { return make_tensor(make_smem_ptr(smem_v + s * kVElems), typename Traits::SmemLayoutVt{}); };

    if (threadIdx.x == 0) {
        for (int b = 0; b < kQBuffers; ++b) {
            cutlass::arch::ClusterBarrier::init(q_full + b, q_tma ? 1 : 128);
            cutlass::arch::ClusterBarrier::init(q_empty + b, kConsumerThreads);
        }
        for (int s = 0; s < kStages; ++s) {
            // TMA: one arrival (with the stage's byte count) by the issuing thread; cp.async: one
            // per producer thread.
            cutlass::arch::ClusterBarrier::init(k_full + s, kv_tma ? 1 : 128);
            cutlass::arch::ClusterBarrier::init(v_full + s, kv_tma ? 1 : 128);
            cutlass::arch::ClusterBarrier::init(k_empty + s, kConsumerThreads);
            cutlass::arch::ClusterBarrier::init(v_empty + s, kConsumerThreads);
        }
        for (int s = 0; s < 2; ++s) {
            cutlass::arch::ClusterBarrier::init(tile_full + s, 1);
            cutlass::arch::ClusterBarrier::init(tile_empty + s, Traits::kCtaThreads);
        }
        cutlass::arch::fence_barrier_init();
        if (kv_tma) {
            cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(&params.k_map));
            cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(&params.v_map));
        }
        if (q_tma) cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(&params.q_map));
        if (Traits::kOwnOBuffer && params.o_tma)
            cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(&params.o_map));
    }
    __syncthreads(); // the last CTA-wide barrier

    // The tiles of this CTA, the same sequence for the producer and the consumers. A tile whose
    // query block starts past its sequence's end (varlen) is skipped by both.
    const int total_tiles = args.num_m_blocks * args.batch * args.num_heads;
    // With a tile counter, thread 0 (a producer thread) claims each next tile and publishes it in a
    // ring of two slots that all the CTA's threads read. Claims follow the tile order (heaviest first under
    // a mask, tile_order.cuh), so an SM that drew light tiles claims more: the balance of one CTA per
    // tile without its start-up per tile. The claim is issued a tile ahead, hiding the atomic.
    const bool claim_tiles = kPersistent && args.tile_counter != nullptr;
    auto claim = [&]() { return atomicAdd(args.tile_counter, 1u) + gridDim.x; };
    auto publish = [&](unsigned claimed, int published) { // thread 0
        const int slot = published & 1;
        if (published >= 2) cutlass::arch::ClusterBarrier::wait(tile_empty + slot, ((published >> 1) - 1) & 1);
        tile_slot[slot] = claimed;
        cutlass::arch::ClusterBarrier::arrive(tile_full + slot);
    };
    auto next_tile = [&](unsigned index, int published) __attribute__((always_inline)) -> unsigned {
        if (!claim_tiles) return index + gridDim.x;
        const int slot = published & 1;
        cutlass::arch::ClusterBarrier::wait(tile_full + slot, (published >> 1) & 1);
        const unsigned next = tile_slot[slot];
        cutlass::arch::ClusterBarrier::arrive(tile_empty + slot);
        return next;
    };
    struct Tile {
        int m_block, b, h, m0, e, num_blocks;
        SequenceBounds seq;
        KvBlockRange range;
    };
    // Under a mask with a right edge (causal, local) the tiles of a sequence end at its last 64-row
    // block instead of starting at its first row: the first tile starts up to kBlockM - 64 rows
    // before row 0 (its consumers there have no rows: they pass its blocks and store nothing), so
    // the tile that holds fewer consumers' rows is the one at the top, which sees the fewest keys.
    // Aligned at the start, it is the one at the bottom, which sees the most, computed by one
    // consumer alone (at 1k rows in 192-row tiles: 8 blocks, each S, its wait, the softmax and the
    // next S in turn, ~2.5x a block's time on the tensor cores at d64). Where O is staged in Q's
    // buffer the tile's rows are stored together, from row m0: there the tiles start at row 0.
    auto tile_shift = [&](int q_len) {
        return Traits::kOwnOBuffer && args.mask.window_right >= 0 ? end_aligned_shift<kBlockM>(q_len) : 0;
    };
    auto tile_at = [&](unsigned index) __attribute__((always_inline)) {
        const TileCoord coord = params.tiles(index);
        Tile t;
        t.m_block = coord.m_block;
        params.tiles.sequence_and_head(coord.bh, t.b, t.h);
        t.seq = sequence_bounds(args, t.b);
        t.m0 = t.m_block * kBlockM - tile_shift(t.seq.q_len);
        t.range = kv_block_range<kBlockM, kBlockN>(args.mask, t.seq, t.m0);
        t.e = t.range.n_end;
        t.num_blocks = max(t.e - t.range.n_begin, 0);
        return t;
    };
    // Rows of one head of x as a (rows, kCols) tensor: Q and K kHeadDim wide, V and O kHeadDimV.
    auto rows_of = [&](auto cols, const Tile& t, const fa_tensor& x, int64_t row0, int head, int rows) {
        return head_rows<Element, decltype(cols)::value>(x, varlen, t.b, row0, head, rows);
    };
    // The real widths (multiples of 8; columns past them are zero-filled and never stored): Q and K
    // args.head_dim, V and O this (their own only in the value-dim instances). Read where used.
    auto head_dim_v = [&]() { return kHeadDimV == kHeadDim ? args.head_dim : args.head_dim_v; };

    // K/V ring position r (counted over all tiles of this CTA): stage r % kStages, the
    // (r / kStages)-th use of that stage (the parity its barriers complete with). Within a tile,
    // block j of the visit order (e - 1 down to n_begin) is at position ring_base + (e - 1 - j).
    if (warpgroup == 0) {
        // ---------------- producer ----------------
        cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
        const int ptid = int(threadIdx.x);
        // One base address and compile-time offsets per chunk (producer_copies.cuh says why).
        using KCopy = SwizzledTileCopy<Element, typename Traits::SmemLayoutK, Traits::kProducerThreads,
                                       Traits::kSwizzleCols>;
        using VCopy = SwizzledTileCopy<Element, typename Traits::SmemLayoutV, Traits::kProducerThreads,
                                       Traits::kSwizzleColsV>;
        using QCopy = SwizzledTileCopy<Element, typename Traits::SmemLayoutQ, Traits::kProducerThreads,
                                       Traits::kSwizzleCols>;
        const KCopy copy_k(ptid);
        const VCopy copy_v(ptid);
        const QCopy copy_q(ptid);
        const uint32_t smem_q_at = cast_smem_ptr_to_uint(smem_q);
        const uint32_t smem_k_at = cast_smem_ptr_to_uint(smem_k), smem_v_at = cast_smem_ptr_to_uint(smem_v);
        const int64_t q_stride = args.q.row_stride, k_stride = args.k.row_stride, v_stride = args.v.row_stride;

        int ring_base = 0, tiles_done = 0;
        // Thread 0 claims each next tile a tile ahead (the atomic's latency hides under a tile's
        // loads) and publishes it when the CTA moves on. The counter was cleared by the kernel before
        // this one, of which this one is a programmatic dependent (fwd_launch_sm90.cuh), so the
        // first claim waits for that kernel's end; Q, K and V need no wait: their writers had
        // finished before the clearing kernel started.
        if (claim_tiles && ptid == 0) wait_for_prerequisite_grid();
        unsigned claimed = claim_tiles && ptid == 0 ? claim() : 0u;
        auto publish_next = [&](int published) {
            if (claim_tiles && ptid == 0) {
                publish(claimed, published);
                claimed = claim();
            }
            return published;
        };
        int published = 0;
        for (unsigned index = blockIdx.x; index < unsigned(total_tiles);
             index = next_tile(index, publish_next(published++))) {
            const Tile t = tile_at(index);
            if (t.m0 >= t.seq.q_len) {
                if constexpr (kPersistent) continue;
                break;
            }
            // Row 0 of this tile's sequence and head in Q, K, V.
            const int h_kv = params.tiles.kv_head(t.h);
            const Element* q_rows = rows_of(Int<kHeadDim>{}, t, args.q, t.seq.q_row0, t.h, t.seq.q_len).data().get();
            const Element* k_rows = rows_of(Int<kHeadDim>{}, t, args.k, t.seq.k_row0, h_kv, t.seq.k_len).data().get();
            const Element* v_rows = rows_of(Int<kHeadDimV>{}, t, args.v, t.seq.k_row0, h_kv, t.seq.k_len).data().get();
            // A readable address for the zero-filled chunks: Q has rows (m0 < q_len); K may not.
            const Element* safe = q_rows;
            // Block idx of the visit order into its stage of K's ring or V's (copy: KCopy or VCopy,
            // whose tile is the stage; the TMA boxes are its swizzle-row-wide column blocks).
            auto produce_block = [&](int idx, auto is_v, const auto& copy, const Element* rows, int64_t stride,
                                     uint32_t smem_at, uint64_t* full, uint64_t* empty, const CUtensorMap* map,
                                     Element* smem_ring) __attribute__((always_inline)) {
                using Copy = std::decay_t<decltype(copy)>;
                constexpr int kStageElems = Copy::kRows * Copy::kCols, kBoxCols = Copy::kBlockCols;
                constexpr uint32_t kStageBytes = kStageElems * sizeof(Element);
                static_assert(Copy::kRows == kBlockN);
                const int r = ring_base + idx;
                const int s = r % kStages;
                const int j = t.e - 1 - idx;
                if (kv_tma) {
                    if (ptid != 0) return;
                    if (r >= kStages) cutlass::arch::ClusterBarrier::wait(empty + s, ((r / kStages) - 1) & 1);
                    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(full + s, kStageBytes);
                    tma_load_tile<kBlockN, Copy::kCols, kBoxCols>(map, full + s, smem_ring + s * kStageElems,
                                                                  j * kBlockN, h_kv, t.b);
                    return;
                }
                if (r >= kStages) cutlass::arch::ClusterBarrier::wait(empty + s, ((r / kStages) - 1) & 1);
                copy.load_async(smem_at + s * kStageBytes, rows + int64_t(j) * kBlockN * stride, stride,
                                t.seq.k_len - j * kBlockN, decltype(is_v)::value ? head_dim_v() : args.head_dim, safe);
                cutlass::arch::cpasync_barrier_arrive_noinc(full + s);
            };
            auto produce_k = [&](int idx) __attribute__((always_inline)) {
                produce_block(idx, cute::false_type{}, copy_k, k_rows, k_stride, smem_k_at, k_full, k_empty,
                              &params.k_map, smem_k);
            };
            auto produce_v = [&](int idx) __attribute__((always_inline)) {
                // (One copy object where K and V have the same tile: copy_v is then dead code.)
                const auto& copy = first_if<std::is_same_v<KCopy, VCopy>>(copy_k, copy_v);
                produce_block(idx, cute::true_type{}, copy, v_rows, v_stride, smem_v_at, v_full, v_empty,
                              &params.v_map, smem_v);
            };
            // Q into its buffer once the consumers are done with that buffer's previous tile. (Rows
            // before the sequence's first, in an end-aligned first tile: zero-filled, not read.)
            auto produce_q = [&]() __attribute__((always_inline)) {
                const int b = q_buffer(tiles_done);
                if (q_tma) { // (thread 32: Q's copy does not wait behind thread 0's K / V loads)
                    if (ptid != 32) return;
                    if (tiles_done >= kQBuffers)
                        cutlass::arch::ClusterBarrier::wait(q_empty + b, q_parity(tiles_done - kQBuffers));
                    cutlass::arch::ClusterTransactionBarrier::arrive_and_expect_tx(q_full + b, Traits::kQBytes);
                    tma_load_tile<kBlockM, kHeadDim, Traits::kSwizzleCols>(&params.q_map, q_full + b, smem_q + b * kQElems,
                                                                           t.m0, t.h, t.b);
                    return;
                }
                if (tiles_done >= kQBuffers)
                    cutlass::arch::ClusterBarrier::wait(q_empty + b, q_parity(tiles_done - kQBuffers));
                copy_q.load_async(smem_q_at + b * kQElems * int(sizeof(Element)), q_rows + int64_t(t.m0) * q_stride,
                                  q_stride, max(-t.m0, 0), t.seq.q_len - t.m0, args.head_dim, safe);
                cutlass::arch::cpasync_barrier_arrive_noinc(q_full + b);
            };
            // With two Q buffers Q goes first: its buffer was freed a tile ago, and the consumers
            // wait for it as soon as they finish this tile's predecessor. With one, the first K
            // block goes before it: that needs no more than a free stage, while Q's buffer is free
            // only once the consumers have stored the previous tile's O from it.
            if (kQBuffers > 1) produce_q();
            if (t.num_blocks > 0) produce_k(0);
            if (kQBuffers == 1) produce_q();
            if (t.num_blocks > 0) produce_v(0);
            for (int idx = 1; idx < t.num_blocks; ++idx) {
                produce_k(idx);
                produce_v(idx);
            }
            ring_base += t.num_blocks;
            ++tiles_done;
            if constexpr (!kPersistent) break; // one tile: the loop's state folds to constants
        }
        cp_async_wait<0>(); // stay resident until the copies land (the barriers are in this CTA)
        return;
    }

    // ---------------- consumers ----------------
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
    const int tid = int(threadIdx.x) - 128; // over the consumer warpgroups
    const int consumer = warpgroup - 1;
    constexpr int kConsumers = Traits::kWarpGroups;
    // Named barriers (cutlass::arch::NamedBarrier adds its reserved offset): the ping-pong ring, one
    // per consumer, and the epilogue's: one per consumer (O in its own buffer), or one for all
    // (kEpilogueBarrier).
    constexpr uint32_t kTurnBarrier0 = 0, kEpilogueBarrier = kConsumers;

    // Q in registers for S (Sm90FwdTraits::kQInRegisters; not in the extras kernel, whose score
    // policies already spill at 232 registers): loaded from its buffer once a tile.
    constexpr bool kQRegs = Traits::kQInRegisters && !kExtras;
    std::conditional_t<kQRegs, typename Traits::TiledMmaSQRegs, typename Traits::TiledMmaS> mma_s;
    typename Traits::TiledMmaO mma_o;
    auto mma_s_thr = mma_s.get_thread_slice(tid);
    auto mma_o_thr = mma_o.get_thread_slice(tid);
    Tensor acc_o = partition_fragment_C(mma_o, Shape<Int<kBlockM>, Int<kHeadDimV>>{});
    Tensor acc_s = partition_fragment_C(mma_s, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor p_storage = make_tensor<Element>(acc_s.layout());
    Tensor tOrP = make_tensor(p_storage.data(), wgmma_accumulator_as_a_operand(acc_s.layout()));
    // This tile's Q: its registers, or its descriptors (set per tile).
    Tensor tSrQ = mma_s_thr.partition_fragment_A(q_tile(0));
    auto issue_s = [&](int s) {
        Tensor tSrK = mma_s_thr.partition_fragment_B(k_stage(s));
        wgmma_issue<true>(mma_s, tSrQ, tSrK, acc_s);
    };
    // The diagonal block over its first half of keys (Traits::kNarrowDiagonal): S into an accumulator
    // of half width, copied into acc_s's first half (wgmma's accumulator holds column group v / 4 in
    // register v) with -inf past it, where no row sees a key; P V over the k-steps of that half.
    constexpr bool kNarrow = kQRegs && Traits::kNarrowDiagonal;
    constexpr int kHalfN = kBlockN / 2;
    using TiledMmaSHalf = std::conditional_t<kNarrow, typename Traits::TiledMmaSQRegsHalf, decltype(mma_s)>;
    TiledMmaSHalf mma_s_half;
    auto mma_s_half_thr = mma_s_half.get_thread_slice(tid);
    // A tile's first P V starts O (wgmma's scale-d 0), so O is not cleared per tile; `half`: the
    // narrowed first block's (kNarrow), over the first half of the k-steps.
    auto issue_pv = [&](int s, bool first, bool half = false) {
        Tensor tOrVt = mma_o_thr.partition_fragment_B(vt_stage(s));
        if (kNarrow && half) {
            wgmma_issue<false, decltype(size<2>(tOrVt))::value / 2>(mma_o, tOrP, tOrVt, acc_o, first);
        } else {
            wgmma_issue<false>(mma_o, tOrP, tOrVt, acc_o, first);
        }
    };
    // (The proxy fence only after cp.async, whose writes go through the generic proxy: TMA's are
    // the async proxy's own, as the wgmma's reads.)
    auto wait_full = [&](uint64_t* barrier, int r) {
        cutlass::arch::ClusterBarrier::wait(barrier + r % kStages, (r / kStages) & 1);
        if (!kv_tma) cutlass::arch::fence_view_async_shared();
    };
    auto release = [&](uint64_t* barrier, int r) { cutlass::arch::ClusterBarrier::arrive(barrier + r % kStages); };

    Tensor tScS = mma_s_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    Tensor s_coords = make_tensor(tScS.data(), wgmma_rows_cols(tScS.layout()));
    Tensor acc_o_rows = make_tensor(acc_o.data(), wgmma_rows_cols(acc_o.layout()));
    constexpr int kRows = decltype(size<0>(acc_o_rows))::value;
    auto scores_to_p = [&]() {
        Tensor p = convert_fragment<Element>(acc_s);
        CUTE_UNROLL
        for (int i = 0; i < size(p); ++i) p_storage(i) = p(i);
    };

    // O by TMA (Sm90FwdParams::o_tma, only with O in its own buffer): thread 0 of each consumer.
    const bool o_tma = Traits::kOwnOBuffer && params.o_tma;
    const bool store_leader = tid % 128 == 0;

    // Ping-pong: the consumers issue their products in turn, 0, 1, (2,) 0, ...: consumer c after
    // consumer c - 1 has issued its own (barrier kTurnBarrier0 + c: c's 128 threads wait, those of
    // the consumer before it in the ring arrive). Every issue takes a turn: a tile's first S, each
    // step's S and P V, its last P V; the ring runs on across tiles, so the consumers keep their
    // offset through a tile's edges (one's epilogue under the other's products). A consumer
    // computes only the key blocks its own 64 rows see (row_blocks: under a causal or local mask
    // the top rows of a tile end a block or more before its bottom rows; rows past the sequence's
    // end see none) and passes the others, taking their turns without products, so every consumer
    // sees the same tiles and takes num_blocks + 1 turns in each: the last consumer opens the ring
    // once, and consumer 0 takes the turn its last pass leaves open after the last tile.
    constexpr int kLastConsumer = kConsumers - 1;
    auto take_turn = [&]() { cutlass::arch::NamedBarrier::sync(2 * 128, kTurnBarrier0 + consumer); };
    auto pass_turn = [&]() {
        cutlass::arch::NamedBarrier::arrive(2 * 128, kTurnBarrier0 + (consumer + 1) % kConsumers);
    };
    if (consumer == kLastConsumer) cutlass::arch::NamedBarrier::arrive(2 * 128, kTurnBarrier0 + 0);
    // The first block's S over the half (kNarrow) in this consumer's turn, waited for here: the two
    // paths of the first block join only after their waits, and acc_s is written whole after the
    // wait (joined before it, or with acc_s's other half left as it was, ptxas serialised every wgmma
    // of the kernel: C7515, C7511).
    auto s_half = [&](int s) {
        if constexpr (kNarrow) {
            Tensor acc_half = partition_fragment_C(mma_s_half, Shape<Int<kBlockM>, Int<kHalfN>>{});
            Tensor k_half = local_tile(k_stage(s), Shape<Int<kHalfN>, Int<kHeadDim>>{}, make_coord(0, 0));
            Tensor tSrK = mma_s_half_thr.partition_fragment_B(k_half);
            wgmma_issue<true>(mma_s_half, tSrQ, tSrK, acc_half);
            pass_turn();
            warpgroup_wait<0>();
            warpgroup_fence_operand(acc_half);
            CUTE_UNROLL
            for (int i = 0; i < size(acc_s); ++i) acc_s(i) = i < size(acc_half) ? acc_half(i) : -INFINITY;
        }
    };

    int ring_base = 0, tiles_done = 0;
    int published = 0;
    for (unsigned index = blockIdx.x; index < unsigned(total_tiles); index = next_tile(index, published++)) {
        const Tile t = tile_at(index);
        if (t.m0 >= t.seq.q_len) {
            if constexpr (kPersistent) continue;
            break;
        }
        const int e = t.e, m0 = t.m0, num_blocks = t.num_blocks;
        // This consumer's rows see the blocks [mine.n_begin, mine.n_end) of the tile's (visit
        // positions lead .. lead + own_blocks - 1), fully allowed in [mine.unmasked_begin, _end).
        const KvBlockRange mine = row_blocks<64, kBlockN>(args.mask, t.seq, t.range, m0 + consumer * 64);
        const int lead = e - mine.n_end, own_blocks = mine.n_end - mine.n_begin;
        if (own_blocks == 0) clear(acc_o); // (else the first P V starts it)
        OnlineSoftmax<kRows> softmax;

        // The running max moves only past this slack (OnlineSoftmax::absorb_scores): P up to 2^8.
        constexpr int kMaxSlack = 8;
        float exp_scale = args.scale_log2;
        float alibi_slope = 0.0f;
        DropoutKey dropout_key{};
        if constexpr (kExtras) {
            if (args.transform_scores) exp_scale = 1.4426950408889634f;
            if (args.alibi_slopes) alibi_slope = args.alibi_slopes[int64_t(t.b) * args.alibi_batch_stride + t.h];
            if (args.dropout) dropout_key = args.dropout_key();
        }
        auto softmax_block = [&](int j, auto masked_tag, auto& correction) __attribute__((always_inline)) {
            constexpr bool kMasked = decltype(masked_tag)::value;
            const int n0 = j * kBlockN;
            Tensor scores = make_tensor(acc_s.data(), wgmma_rows_cols(acc_s.layout()));
            if constexpr (kExtras) {
                if (args.transform_scores) apply_score_transform(scores, s_coords, args, alibi_slope, t.seq, m0, n0);
            }
            if constexpr (kMasked) apply_key_mask(scores, s_coords, args.mask, t.seq, m0, n0);
            softmax.template absorb_scores<kMaxSlack>(scores, exp_scale, correction);
            if constexpr (kExtras) {
                if (args.dropout) apply_dropout(scores, s_coords, args, dropout_key, t.b, t.h, m0, n0);
            }
        };

        // Every tile waits for its Q and releases it once, also one without K/V blocks: that keeps
        // q_full and q_empty in step with the producer. With O in a buffer of its own, Q is released
        // when this thread's last S = Q K^T of the tile is done (after the wait that follows it).
        const int q_now = q_buffer(tiles_done);
        auto release_q_after_s = [&](bool last_s) {
            if (Traits::kOwnOBuffer && last_s) cutlass::arch::ClusterBarrier::arrive(q_empty + q_now);
        };
        if constexpr (!kQRegs) tSrQ = mma_s_thr.partition_fragment_A(q_tile(q_now));
        cutlass::arch::ClusterBarrier::wait(q_full + q_now, q_parity(tiles_done));
        // Q came by cp.async (by TMA, Sm90FwdParams::q_tma, it needs no fence: unconditional, so that
        // the consumers hold no flag for it, which cost the extras kernel 116 B of spills).
        cutlass::arch::fence_view_async_shared();
        if constexpr (kQRegs) { // ldmatrix into S's A fragment (a consumer without blocks needs none)
            if (own_blocks > 0) {
                auto copy_q = make_tiled_copy_A(typename Traits::SmemCopyQ{}, mma_s);
                auto copy_q_thr = copy_q.get_thread_slice(tid);
                copy(copy_q, copy_q_thr.partition_S(q_tile(q_now)), copy_q_thr.retile_D(tSrQ));
            }
        }
        release_q_after_s(own_blocks == 0);
        // A block this consumer's rows do not see (fully masked for them, or rows past the
        // sequence's end): its turn and its stages' releases, no products. Every consumer takes
        // num_blocks + 1 turns in a tile that has blocks, whichever of them it computes.
        auto pass_block = [&](int idx) {
            const int r = ring_base + idx;
            wait_full(k_full, r); // (a release may only follow the stage's previous phase)
            take_turn();
            pass_turn();
            release(k_empty, r);
            wait_full(v_full, r);
            release(v_empty, r);
        };
        for (int idx = 0; idx < lead; ++idx) pass_block(idx);
        const int first = mine.n_end - 1; // this consumer's first block in the visit order
        // Whether this consumer's rows see only the first half of that block (kNarrow): the last
        // row's keys end there (a right window edge, or the sequence's last keys).
        bool narrow = false;
        if constexpr (kNarrow) {
            if (own_blocks > 0) {
                const int last_row = min(m0 + consumer * 64 + 64, t.seq.q_len) - 1;
                int64_t key_end = t.seq.k_len;
                if (args.mask.is_local())
                    key_end = min(key_end, args.mask.keys_for_row(t.seq.query_row(last_row), t.seq.query_len(), t.seq.k_len).end);
                narrow = key_end <= int64_t(first) * kBlockN + kHalfN;
            }
        }
        if (own_blocks > 0) {
            const int r = ring_base + lead;
            wait_full(k_full, r);
            take_turn();
            if (narrow) {
                s_half(r % kStages);
            } else {
                issue_s(r % kStages);
                pass_turn();
                warpgroup_wait<0>();
            }
            warpgroup_fence_operand(acc_s);
            release(k_empty, r);
            release_q_after_s(own_blocks == 1);
            // The first block by the loop's rule too, unmasked where the range allows; not in the
            // extras kernel, whose block code is long enough that another copy of it costs a quarter
            // more code for a twentieth of a tile's instructions.
            float unused[kRows];
            if (!kExtras && first >= mine.unmasked_begin && first < mine.unmasked_end) {
                softmax_block(first, cute::false_type{}, unused);
            } else {
                softmax_block(first, cute::true_type{}, unused);
            }
            scores_to_p();
        }

        // Step idx (block j = e - 1 - idx): S = Q K[j]^T and O += P[j+1] V[j+1] in one turn, then
        // the softmax of S while P V runs. K[j]'s stage is released once S is done, V[j+1]'s once
        // P V is.
        auto step = [&](int idx, auto masked_tag) __attribute__((always_inline)) {
            const int j = e - 1 - idx;
            const int r = ring_base + idx;
            wait_full(k_full, r);
            wait_full(v_full, r - 1);
            take_turn();
            issue_s(r % kStages);
            issue_pv((r - 1) % kStages, idx == lead + 1, narrow && idx == lead + 1);
            pass_turn();
            warpgroup_wait<1>();
            warpgroup_fence_operand(acc_s);
            release(k_empty, r);
            release_q_after_s(j == mine.n_begin);
            float correction[kRows];
            softmax_block(j, masked_tag, correction);
            // (With the slack most blocks past the first keep every row's max: no multiplies.)
            auto wait_pv = [&]() __attribute__((always_inline)) {
                warpgroup_wait<0>();
                warpgroup_fence_operand(acc_o);
                release(v_empty, r - 1);
            };
            // With Q in registers the wait needs holding below the exponentials (rescale_after); the
            // other kernels' placement is ptxas's, which measured no worse than held (d64 lost 1-3%
            // held: docs/perf-log.md, K).
            if constexpr (kQRegs) {
                softmax.rescale_after(acc_o_rows, correction, wait_pv);
            } else {
                wait_pv();
                OnlineSoftmax<kRows>::rescale_unless_all_one(acc_o_rows, correction);
            }
            scores_to_p();
        };
        for (int j = first - 1; j >= mine.n_begin;) {
            for (; j >= mine.n_begin && (j >= mine.unmasked_end || j < mine.unmasked_begin); --j)
                step(e - 1 - j, cute::true_type{});
            for (; j >= mine.n_begin && j >= mine.unmasked_begin && j < mine.unmasked_end; --j)
                step(e - 1 - j, cute::false_type{});
        }
        if (own_blocks > 0) { // the last block's P V
            const int r = ring_base + lead + own_blocks - 1;
            wait_full(v_full, r);
            take_turn();
            issue_pv(r % kStages, own_blocks == 1, narrow && own_blocks == 1);
            pass_turn();
            warpgroup_wait<0>();
            warpgroup_fence_operand(acc_o);
            release(v_empty, r);
        } else if (num_blocks > 0) { // the turn of a last P V
            take_turn();
            pass_turn();
        }
        for (int idx = lead + own_blocks; idx < num_blocks; ++idx) pass_block(idx);

        // Epilogue: O normalised, through shared memory (O's buffer or Q's) to global memory; the lse.
        // A consumer whose rows lie before the sequence (an end-aligned first tile) stores nothing.
        if (!(Traits::kOwnOBuffer && m0 + consumer * 64 < 0)) {
            float row_lse[kRows];
            absorb_sinks(softmax, acc_o_rows, args, s_coords, t.h, false, m0, t.seq.q_len, exp_scale);
            softmax.finish(acc_o_rows, exp_scale, kExtras && args.dropout ? args.keep_rescale : 1.0f, row_lse,
                           t.seq.faulted);
            Tensor o = convert_fragment<Element>(acc_o);
            Tensor sO = make_tensor(make_smem_ptr(smem_o), typename Traits::SmemLayoutO{});
            auto copy_o = make_tiled_copy_C(typename Traits::SmemCopyO{}, mma_o);
            auto copy_o_thr = copy_o.get_thread_slice(tid);
            Tensor tOrO_view = copy_o_thr.retile_S(o);
            Tensor tOsO = copy_o_thr.partition_D(sO);
            // The threads that stage and store these rows (Sm90FwdTraits::kEpilogueRows) are done with
            // the buffer: with the previous tile's store from it, and where it is Q's, with this tile's Q.
            constexpr int kEpilogueRows = Traits::kEpilogueRows, kEpilogueThreads = Traits::kEpilogueThreads;
            const int epilogue_part = Traits::kOwnOBuffer ? consumer : 0; // rows of O this thread stores
            const uint32_t epilogue_barrier = kEpilogueBarrier + epilogue_part;
            // With O stored by TMA, its issuing thread first waits until its previous store has read
            // these rows of the buffer (the others wait for it at the barrier).
            if (o_tma && store_leader) tma_store_wait<0>();
            cutlass::arch::NamedBarrier::sync(kEpilogueThreads, epilogue_barrier);
            copy(copy_o, tOrO_view, tOsO);

            if (args.lse) {
                Tensor tOcO = mma_o_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDimV>>{}));
                Tensor o_coords = make_tensor(tOcO.data(), wgmma_rows_cols(tOcO.layout()));
                if (get<1>(o_coords(0, 0)) == 0) {
                    CUTE_UNROLL
                    for (int r = 0; r < kRows; ++r) {
                        const int i = m0 + get<0>(o_coords(r, 0));
                        if (i < t.seq.q_len) {
                            const int64_t index = varlen ? int64_t(t.h) * args.total_q + t.seq.q_row0 + i
                                                         : (int64_t(t.b) * args.num_heads + t.h) * args.seqlen_q + i;
                            args.lse[index] = row_lse[r];
                        }
                    }
                }
            }
            if (o_tma) {
                // Every thread's writes of its part of O made visible to the async proxy, then one
                // thread stores the part, a box per swizzle-row-wide column block (the buffer holds
                // each column block's kBlockM rows contiguously, this consumer's 64 at epilogue_part).
                cutlass::arch::fence_view_async_shared();
                cutlass::arch::NamedBarrier::sync(kEpilogueThreads, epilogue_barrier);
                if (store_leader) {
                    constexpr int kBoxCols = Traits::kSwizzleColsV;
                    tma_store_tile<kBlockM, kHeadDimV, kBoxCols>(&params.o_map,
                                                                smem_o + epilogue_part * kEpilogueRows * kBoxCols,
                                                                m0 + epilogue_part * kEpilogueRows, t.h, t.b);
                    tma_store_arrive();
                }
            } else {
                cutlass::arch::NamedBarrier::sync(kEpilogueThreads, epilogue_barrier);
                Tensor mO = rows_of(Int<kHeadDimV>{}, t, args.out, t.seq.q_row0, t.h, t.seq.q_len);
                Tensor gO = local_tile(mO, Shape<Int<kEpilogueRows>, Int<kHeadDimV>>{},
                                       make_coord(m0 / kEpilogueRows + epilogue_part, 0));
                Tensor sO_part =
                    local_tile(sO, Shape<Int<kEpilogueRows>, Int<kHeadDimV>>{}, make_coord(epilogue_part, 0));
                const int store_tid = tid - epilogue_part * kEpilogueThreads;
                // The store's column predicate: chunks whose first column is past the real head dim.
                typename Traits::GmemStore gmem_store;
                auto store_thr = gmem_store.get_thread_slice(store_tid);
                Tensor tOc = store_thr.partition_D(make_identity_tensor(Shape<Int<kEpilogueRows>, Int<kHeadDimV>>{}));
                Tensor store_column_ok = head_dim_chunks(tOc, head_dim_v());
                store_tile<typename Traits::GmemStore>(store_tid, sO_part, gO, store_column_ok,
                                                       t.seq.q_len - m0 - epilogue_part * kEpilogueRows);
            }
            if constexpr (!Traits::kOwnOBuffer) cutlass::arch::ClusterBarrier::arrive(q_empty + q_now); // read its part of O
        }
        ring_base += num_blocks;
        ++tiles_done;
        if constexpr (!kPersistent) break;
    }
    if (consumer == 0) take_turn(); // the ring's last open turn
    if (o_tma && store_leader) tma_store_wait<0>(); // the buffer stays until the last store has read it
#endif // __CUDA_ARCH_FEAT_SM90_ALL
}

} // namespace flashattn::cuda::kernels
