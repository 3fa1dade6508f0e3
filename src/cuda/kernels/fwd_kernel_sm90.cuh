// The Hopper (sm_90a) forward: FlashAttention-2's algorithm with wgmma products, scheduled
// FlashAttention-3's way (warp specialisation). Tiles and the CuTe objects: fwd_traits_sm90.cuh.
//
//   warpgroup 0 (producer)     cp.async of Q once, then K[j] and V[j] into a ring of stages; each
//                              stage's arrival is signalled on an mbarrier (cp.async.mbarrier.arrive),
//                              its reuse waits for both consumers to release it (another mbarrier)
//   warpgroups 1, 2 (consumer) 64 query rows each: S = Q K^T, softmax, O += P V (wgmma)
//
// Nothing in the main loop synchronises the whole CTA, so the two consumers can drift apart, and a
// pair of named barriers makes them alternate ("ping-pong"): one issues its two products while the
// other runs its softmax, so the tensor cores are busy during the exp2s (the softmax of one
// warpgroup is a third of its block time at d128, half at d64).
//
// Memory model: the producer writes shared memory only with cp.async (zero-filling with a source
// size of 0 where rows or columns lie outside the tensor), so the mbarrier that tracks its cp.asyncs
// covers every byte. A consumer that waited on it runs fence.proxy.async before its wgmma reads the
// stage (cp.async writes through the generic proxy, wgmma reads through the async proxy).
#pragma once

#include "fwd_args.h"
#include "kernels/fwd_traits_sm90.cuh"
#include "kernels/online_softmax.cuh"
#include "kernels/score_policies.cuh"
#include "kernels/tile_ops.cuh"
#include "kernels/tile_order.cuh"
#include "kernels/wgmma_ops.cuh"

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

namespace flashattn::cuda::kernels {

using namespace cute;

// 16 bytes global -> shared, or 16 zero bytes when !valid (source size 0: nothing is read, but the
// address must still be a valid one, so the caller passes a safe pointer then).
__device__ __forceinline__ void cp_async_16_or_zero(void* smem, const void* gmem, bool valid) {
    const uint32_t dst = cast_smem_ptr_to_uint(smem);
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
                 "r"(valid ? 16 : 0));
}

// One tile global -> shared by the producer's threads, every 16-byte chunk through cp.async (the
// out-of-bounds ones zero-filled by it too, so that the mbarrier tracking the cp.asyncs covers every
// byte). rows_valid / column_ok as load_tile (tile_ops.cuh); `safe` is any readable address.
template <typename Src, typename Dst, typename Coords, typename ColumnOk, typename Element>
__device__ __forceinline__ void produce_tile(Src const& src, Dst&& dst, Coords const& coords, ColumnOk const& column_ok,
                                             int rows_valid, const Element* safe) {
    // The same walk as for_each_tile_chunk (tile_ops.cuh), kept as the code that ran on the H200:
    // the lambda form changes this kernel's code (16 B fewer spills) and has not run yet
    // (branch exp/next-run has it).
    const int row0 = get<0>(coords(0, 0, 0));
    const int rows_left = rows_valid - row0;
    CUTE_UNROLL
    for (int m = 0; m < size<1>(dst); ++m) {
        const bool row_ok = get<0>(coords(0, m, 0)) - row0 < rows_left;
        CUTE_UNROLL
        for (int k = 0; k < size<2>(dst); ++k) {
            const bool ok = row_ok && column_ok(k);
            const Element* from = ok ? &src(0, m, k) : safe;
            cp_async_16_or_zero(raw_pointer_cast(&dst(0, m, k)), from, ok);
        }
    }
}

template <typename Traits, bool kExtras>
__global__ void __launch_bounds__(Traits::kCtaThreads, 1)
    fwd_kernel_sm90(const __grid_constant__ FwdArgs args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Element = typename Traits::Element;
    constexpr int kBlockM = Traits::kBlockM;
    constexpr int kBlockN = Traits::kBlockN;
    constexpr int kHeadDim = Traits::kHeadDim;
    constexpr int kStages = Traits::kStages;
    constexpr int kConsumerThreads = Traits::kThreads; // two warpgroups
    const int warpgroup = int(threadIdx.x) / 128;

    const TileCoord tile = tile_of_block(blockIdx.x, args.num_m_blocks, args.batch * args.num_heads,
                                         args.section_heads);
    const int m_block = tile.m_block;
    const int bh = tile.bh;
    const int b = bh / args.num_heads;
    const int h = bh - b * args.num_heads;
    const int h_kv = h / args.heads_per_kv_head;

    const SequenceBounds seq = sequence_bounds(args, b);
    const int m0 = m_block * kBlockM;
    if (m0 >= seq.q_len) return; // the whole CTA: no barrier has been touched yet
    const KvBlockRange range = kv_block_range<kBlockM, kBlockN>(args.mask, seq, m0);
    const int e = range.n_end;
    const int num_blocks = max(e - range.n_begin, 0);

    const bool varlen = args.cu_seqlens_q != nullptr;
    auto rows_of = [&](const fa_tensor& t, int64_t row0, int head, int rows) {
        return head_rows<Element, kHeadDim>(t, varlen, b, row0, head, rows);
    };
    Tensor mQ = rows_of(args.q, seq.q_row0, h, seq.q_len);
    Tensor mK = rows_of(args.k, seq.k_row0, h_kv, seq.k_len);
    Tensor mV = rows_of(args.v, seq.k_row0, h_kv, seq.k_len);
    Tensor mO = rows_of(args.out, seq.q_row0, h, seq.q_len);

    // Shared memory: Q, kStages K blocks, kStages V blocks, then the barriers.
    extern __shared__ __align__(1024) char smem[];
    constexpr int kKvElems = cosize(typename Traits::SmemLayoutKV{});
    Element* smem_q = reinterpret_cast<Element*>(smem);
    Element* smem_k = smem_q + cosize(typename Traits::SmemLayoutQ{});
    Element* smem_v = smem_k + kStages * kKvElems;
    uint64_t* bar = reinterpret_cast<uint64_t*>(smem_v + kStages * kKvElems);
    // K and V have separate rings, so a K stage is refilled as soon as S = Q K^T is done with it,
    // a full P V earlier than its V.
    uint64_t* q_full = bar;                     // Q landed (producer threads)
    uint64_t* k_full = bar + 1;                 // [kStages] K[j] landed
    uint64_t* v_full = bar + 1 + kStages;       // [kStages] V[j] landed
    uint64_t* k_empty = bar + 1 + 2 * kStages;  // [kStages] both consumers are done with K[j]
    uint64_t* v_empty = bar + 1 + 3 * kStages;  // [kStages] ... with V[j]
    Tensor sQ = make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutQ{});
    auto k_stage = [&](int s) { return make_tensor(make_smem_ptr(smem_k + s * kKvElems), typename Traits::SmemLayoutKV{}); };
    auto v_stage = [&](int s) { return make_tensor(make_smem_ptr(smem_v + s * kKvElems), typename Traits::SmemLayoutKV{}); };
    auto vt_stage = [&](int s) { return make_tensor(make_smem_ptr(smem_v + s * kKvElems), typename Traits::SmemLayoutVt{}); };

    if (threadIdx.x == 0) {
        cutlass::arch::ClusterBarrier::init(q_full, 128);
        for (int s = 0; s < kStages; ++s) {
            cutlass::arch::ClusterBarrier::init(k_full + s, 128);
            cutlass::arch::ClusterBarrier::init(v_full + s, 128);
            cutlass::arch::ClusterBarrier::init(k_empty + s, kConsumerThreads);
            cutlass::arch::ClusterBarrier::init(v_empty + s, kConsumerThreads);
        }
        cutlass::arch::fence_barrier_init();
    }
    __syncthreads(); // the last CTA-wide barrier

    // Block j of the visit order (e - 1 down to n_begin) is the idx-th: stage idx % kStages, the
    // (idx / kStages)-th use of that stage (the parity its barriers complete with).
    if (warpgroup == 0) {
        // ---------------- producer ----------------
        cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
        if (num_blocks == 0) return;
        const int ptid = int(threadIdx.x);
        typename Traits::GmemLoadProducer gmem_load;
        auto load_thr = gmem_load.get_thread_slice(ptid);
        Tensor tQc = load_thr.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
        Tensor tKVc = load_thr.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
        Tensor column_ok = make_tensor<bool>(make_shape(size<2>(tKVc)));
        CUTE_UNROLL
        for (int k = 0; k < size(column_ok); ++k) column_ok(k) = get<1>(tKVc(0, 0, k)) < args.head_dim;
        Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));
        Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));
        Tensor gV = local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));
        const Element* safe = &mK(0, 0); // k_len > 0 whenever a block is visited

        produce_tile(load_thr.partition_S(gQ), load_thr.partition_D(sQ), tQc, column_ok, seq.q_len - m0, safe);
        cutlass::arch::cpasync_barrier_arrive_noinc(q_full);
        Tensor tKg = load_thr.partition_S(gK);
        Tensor tVg = load_thr.partition_S(gV);
        for (int idx = 0; idx < num_blocks; ++idx) {
            const int j = e - 1 - idx;
            const int s = idx % kStages;
            const int reuse_parity = ((idx / kStages) - 1) & 1;
            const int rows_valid = seq.k_len - j * kBlockN;
            if (idx >= kStages) cutlass::arch::ClusterBarrier::wait(k_empty + s, reuse_parity);
            produce_tile(tKg(_, _, _, j), load_thr.partition_D(k_stage(s)), tKVc, column_ok, rows_valid, safe);
            cutlass::arch::cpasync_barrier_arrive_noinc(k_full + s);
            if (idx >= kStages) cutlass::arch::ClusterBarrier::wait(v_empty + s, reuse_parity);
            produce_tile(tVg(_, _, _, j), load_thr.partition_D(v_stage(s)), tKVc, column_ok, rows_valid, safe);
            cutlass::arch::cpasync_barrier_arrive_noinc(v_full + s);
        }
        cp_async_wait<0>(); // stay resident until the copies land (the barriers are in this CTA)
        return;
    }

    // ---------------- consumers ----------------
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
    const int tid = int(threadIdx.x) - 128; // 0..255 over the two consumer warpgroups
    const int consumer = warpgroup - 1;
    // Named barriers (cutlass::arch::NamedBarrier adds its reserved offset): the ping-pong pair,
    // and one for the two consumers' epilogue.
    constexpr uint32_t kTurnBarrier0 = 0, kEpilogueBarrier = 2;

    typename Traits::TiledMmaS mma_s;
    typename Traits::TiledMmaO mma_o;
    auto mma_s_thr = mma_s.get_thread_slice(tid);
    auto mma_o_thr = mma_o.get_thread_slice(tid);
    Tensor tSrQ = mma_s_thr.partition_fragment_A(sQ);
    Tensor acc_o = partition_fragment_C(mma_o, Shape<Int<kBlockM>, Int<kHeadDim>>{});
    clear(acc_o);
    Tensor acc_s = partition_fragment_C(mma_s, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor p_storage = make_tensor<Element>(acc_s.layout());
    Tensor tOrP = make_tensor(p_storage.data(), wgmma_accumulator_as_a_operand(acc_s.layout()));
    auto issue_s = [&](int s) {
        Tensor tSrK = mma_s_thr.partition_fragment_B(k_stage(s));
        wgmma_issue<true>(mma_s, tSrQ, tSrK, acc_s);
    };
    auto issue_pv = [&](int s) {
        Tensor tOrVt = mma_o_thr.partition_fragment_B(vt_stage(s));
        wgmma_issue<false>(mma_o, tOrP, tOrVt, acc_o);
    };
    auto wait_full = [&](uint64_t* barrier, int idx) {
        cutlass::arch::ClusterBarrier::wait(barrier + idx % kStages, (idx / kStages) & 1);
        cutlass::arch::fence_view_async_shared();
    };
    auto release = [&](uint64_t* barrier, int idx) { cutlass::arch::ClusterBarrier::arrive(barrier + idx % kStages); };

    Tensor tScS = mma_s_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    Tensor s_coords = make_tensor(tScS.data(), wgmma_rows_cols(tScS.layout()));
    Tensor acc_o_rows = make_tensor(acc_o.data(), wgmma_rows_cols(acc_o.layout()));
    constexpr int kRows = decltype(size<0>(acc_o_rows))::value;
    OnlineSoftmax<kRows> softmax;

    float exp_scale = args.scale_log2;
    float alibi_slope = 0.0f;
    DropoutKey dropout_key{};
    if constexpr (kExtras) {
        if (args.transform_scores) exp_scale = 1.4426950408889634f;
        if (args.alibi_slopes) alibi_slope = args.alibi_slopes[int64_t(b) * args.alibi_batch_stride + h];
        if (args.dropout) dropout_key = args.dropout_key();
    }
    auto softmax_block = [&](int j, auto masked_tag, auto& correction) __attribute__((always_inline)) {
        constexpr bool kMasked = decltype(masked_tag)::value;
        const int n0 = j * kBlockN;
        Tensor scores = make_tensor(acc_s.data(), wgmma_rows_cols(acc_s.layout()));
        if constexpr (kExtras) {
            if (args.transform_scores) apply_score_transform(scores, s_coords, args, alibi_slope, seq, m0, n0);
        }
        if constexpr (kMasked) apply_key_mask(scores, s_coords, args.mask, seq, m0, n0);
        softmax.absorb_scores(scores, exp_scale, correction);
        if constexpr (kExtras) {
            if (args.dropout) apply_dropout(scores, s_coords, args, dropout_key, b, h, m0, n0);
        }
    };
    auto scores_to_p = [&]() {
        Tensor p = convert_fragment<Element>(acc_s);
        CUTE_UNROLL
        for (int i = 0; i < size(p); ++i) p_storage(i) = p(i);
    };

    // Ping-pong: consumer c issues its products after the other has issued its own (barrier
    // kTurnBarrier0 + c: 128 threads wait, the other warpgroup's 128 arrive). Consumer 0 goes
    // first. Every wait is matched by exactly one arrive: consumer 1 opens the first turn and
    // skips its last arrive.
    const int steps = num_blocks - 1; // loop iterations, each with one turn per consumer
    auto take_turn = [&]() { cutlass::arch::NamedBarrier::sync(2 * 128, kTurnBarrier0 + consumer); };
    auto pass_turn = [&](int step) {
        if (consumer == 0 || step + 1 < steps) cutlass::arch::NamedBarrier::arrive(2 * 128, kTurnBarrier0 + 1 - consumer);
    };

    if (num_blocks > 0) {
        if (consumer == 1 && steps > 0) cutlass::arch::NamedBarrier::arrive(2 * 128, kTurnBarrier0 + 0);
        cutlass::arch::ClusterBarrier::wait(q_full, 0);
        wait_full(k_full, 0);
        issue_s(0);
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_s);
        release(k_empty, 0);
        float unused[kRows];
        softmax_block(e - 1, cute::true_type{}, unused);
        scores_to_p();
    }

    // Step idx (block j = e - 1 - idx): S = Q K[j]^T and O += P[j+1] V[j+1] in one turn, then the
    // softmax of S while P V runs. K[j]'s stage is released once S is done, V[j+1]'s once P V is.
    auto step = [&](int idx, auto masked_tag) __attribute__((always_inline)) {
        const int j = e - 1 - idx;
        wait_full(k_full, idx);
        wait_full(v_full, idx - 1);
        take_turn();
        issue_s(idx % kStages);
        issue_pv((idx - 1) % kStages);
        pass_turn(idx - 1);
        warpgroup_wait<1>();
        warpgroup_fence_operand(acc_s);
        release(k_empty, idx);
        float correction[kRows];
        softmax_block(j, masked_tag, correction);
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_o);
        release(v_empty, idx - 1);
        OnlineSoftmax<kRows>::rescale(acc_o_rows, correction);
        scores_to_p();
    };
    for (int j = e - 2; j >= range.n_begin;) {
        for (; j >= range.n_begin && (j >= range.unmasked_end || j < range.unmasked_begin); --j)
            step(e - 1 - j, cute::true_type{});
        for (; j >= range.n_begin && j >= range.unmasked_begin && j < range.unmasked_end; --j)
            step(e - 1 - j, cute::false_type{});
    }
    if (num_blocks > 0) { // the last block's P V
        wait_full(v_full, num_blocks - 1);
        issue_pv((num_blocks - 1) % kStages);
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_o);
    }

    // Epilogue, as fwd_kernel_sm90.cuh, with the consumers' own barrier instead of __syncthreads.
    float row_lse[kRows];
    softmax.finish(acc_o_rows, exp_scale, kExtras && args.dropout ? args.keep_rescale : 1.0f, row_lse);
    Tensor o = convert_fragment<Element>(acc_o);
    Tensor sO = make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutO{});
    auto copy_o = make_tiled_copy_C(typename Traits::SmemCopyO{}, mma_o);
    auto copy_o_thr = copy_o.get_thread_slice(tid);
    Tensor tOrO_view = copy_o_thr.retile_S(o);
    Tensor tOsO = copy_o_thr.partition_D(sO);
    cutlass::arch::NamedBarrier::sync(kConsumerThreads, kEpilogueBarrier); // both consumers are done with sQ
    copy(copy_o, tOrO_view, tOsO);

    if (args.lse) {
        Tensor tOcO = mma_o_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
        Tensor o_coords = make_tensor(tOcO.data(), wgmma_rows_cols(tOcO.layout()));
        if (get<1>(o_coords(0, 0)) == 0) {
            CUTE_UNROLL
            for (int r = 0; r < kRows; ++r) {
                const int i = m0 + get<0>(o_coords(r, 0));
                if (i < seq.q_len) {
                    const int64_t index = varlen ? int64_t(h) * args.total_q + seq.q_row0 + i
                                                 : (int64_t(b) * args.num_heads + h) * args.seqlen_q + i;
                    args.lse[index] = row_lse[r];
                }
            }
        }
    }
    cutlass::arch::NamedBarrier::sync(kConsumerThreads, kEpilogueBarrier);
    Tensor gO = local_tile(mO, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));
    // The store's column predicate: chunks whose first column is past the real head dim.
    typename Traits::GmemStore gmem_store;
    auto store_thr = gmem_store.get_thread_slice(tid);
    Tensor tOc = store_thr.partition_D(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor store_column_ok = make_tensor<bool>(make_shape(size<2>(tOc)));
    CUTE_UNROLL
    for (int k = 0; k < size(store_column_ok); ++k) store_column_ok(k) = get<1>(tOc(0, 0, k)) < args.head_dim;
    store_tile<typename Traits::GmemStore>(tid, sO, gO, store_column_ok, seq.q_len - m0);
#endif // __CUDA_ARCH_FEAT_SM90_ALL
}

} // namespace flashattn::cuda::kernels
