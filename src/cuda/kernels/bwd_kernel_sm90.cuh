// The Hopper backward (sm_90a, wgmma, warp-specialised; FLASHATTN_CUDA_BWD_KERNEL=sm90): the same
// algorithm, work items, scratch and policies as bwd_kernel.cuh, with FlashAttention-3's schedule.
//
//   warpgroup 0 (producer)      K, V of the key block once (kv_full), then for every query block
//                               that meets it Q, dO, lse, dsum into a ring of kQStages stages
//                               (q_full[s]); a stage is refilled once both consumers released it
//                               (q_empty[s]), K/V once they finished the key block (kv_empty).
//                               After loading query block u it adds the consumers' dQ of block u-1
//                               from shared memory to the fp32 scratch (dq_full / dq_empty)
//   warpgroups 1, 2 (consumer)  64 keys each; per query block (bwd_traits_sm90.cuh for the shapes):
//     S^T = K Q^T, dP^T = V dO^T          issued together; the softmax work runs under dP^T
//     P^T = exp2(S^T * scale_log2 - lse_log2[query])     [transform] [mask]
//     dS^T = P^T (dP^T - dsum[query])                    [softcap derivative]
//     dV += P^T dO, dK += dS^T Q           RS wgmma, P^T / dS^T from registers
//     dS^T -> shared; both consumers' dS complete (named barrier); dQ = dS K (half the columns
//     each) -> shared, for the producer to add to the fp32 scratch with red.add (per-chunk buffers
//     when deterministic, as bwd_kernel.cuh: every address is added by one producer thread, in order)
//   epilogue: dK *= scale, dV *= 1/(1-p), straight from registers to dk/dv (16-bit pairs) or to the
//   per-query-head fp32 scratch.
//
// Dropout is not supported here (the launcher runs the mma.sync kernel for it): its Philox words
// come in key pairs (j, j+1) per query row, and this kernel's registers hold query pairs.
//
// Memory model (as fwd_kernel_sm90.cuh): the producer writes shared memory only with cp.async
// (zero-fill past the tensor), tracked by cp.async.mbarrier.arrive; consumers run fence.proxy.async
// after waiting, before wgmma reads. dS^T is written with ordinary stores, so each writer fences
// (generic -> async proxy) before the named barrier that hands it to the other consumer's wgmma.
// dS is double-buffered: a consumer writes dS[m] only after passing block m-1's barrier, which the
// other consumer reaches only after its dQ wgmma of block m-2 (the same buffer) completed. The dQ
// buffer is single: consumers write block u's once the producer has read block u-1's (dq_empty),
// which it does right after loading block u, so the wait is normally long over.
// tests/gpu/bwd_sm90_protocol_check.py models all of it.
//
// Index bookkeeping: accumulators of S^T / dP^T are (key row, query column) per warpgroup; the
// policies of the mma.sync kernel take (query row, key column) tensors, which are the transposed
// views `scores_qk` / `coords_qk` below (coordinates generated as (query, key) directly).
#pragma once

#include "bwd_args.h"
#include "kernels/bwd_policies.cuh"
#include "kernels/bwd_traits_sm90.cuh"
#include "kernels/online_softmax.cuh" // fast_exp2
#include "kernels/producer_copies.cuh"
#include "kernels/score_policies.cuh"
#include "kernels/tile_ops.cuh"
#include "kernels/wgmma_ops.cuh"

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

namespace flashattn::cuda::kernels {

using namespace cute;

template <typename Traits, bool kExtras>
__global__ void __launch_bounds__(Traits::kThreads, 1) bwd_kernel_sm90(const __grid_constant__ BwdArgs args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Element = typename Traits::Element;
    constexpr int kBlockM = Traits::kBlockM;
    constexpr int kBlockN = Traits::kBlockN;
    constexpr int kHeadDim = Traits::kHeadDim;
    constexpr int kQStages = Traits::kQStages;
    constexpr float kLog2e = 1.4426950408889634f;
    const FwdArgs& fa = args.fwd;
    const int warpgroup = int(threadIdx.x) / 128;

    // Work item: chunk of key blocks, sequence, query head (as bwd_kernel.cuh).
    const int chunk = int(blockIdx.x % unsigned(args.num_chunks));
    const int bh = int(blockIdx.x / unsigned(args.num_chunks));
    const int b = bh / fa.num_heads;
    const int h = bh - b * fa.num_heads;
    const int h_kv = h / fa.heads_per_kv_head;

    const SequenceBounds seq = sequence_bounds(fa, b);
    const int k_stored = stored_k_rows(fa, b);
    if (chunk * kBlockN >= k_stored) return; // the whole CTA, before any barrier
    const bool varlen = fa.cu_seqlens_q != nullptr;
    auto rows_of = [&](const fa_tensor& t, int64_t row0, int head, int rows) {
        return head_rows<Element, kHeadDim>(t, varlen, b, row0, head, rows);
    };
    // fp32 dQ scratch rows of this (sequence, head) (this chunk's buffer): row i at + i * kHeadDim.
    const int64_t q_global_row0 = varlen ? seq.q_row0 : int64_t(b) * fa.seqlen_q;
    float* const dq_rows = args.dq_accum + chunk * args.dq_chunk_stride +
                           (int64_t(h) * args.q_rows_total + q_global_row0) * kHeadDim;
    // lse / dsum of query row 0 of this (sequence, head); row i at + i.
    const int64_t row_stat0 = varlen ? int64_t(h) * fa.total_q + seq.q_row0 : (int64_t(b) * fa.num_heads + h) * fa.seqlen_q;

    // Shared memory (bwd_traits_sm90.cuh).
    extern __shared__ __align__(1024) char smem[];
    Element* const smem_q = reinterpret_cast<Element*>(smem);
    Element* const smem_do = smem_q + kQStages * Traits::kSmemQElems;
    Element* const smem_k = smem_do + kQStages * Traits::kSmemQElems;
    Element* const smem_v = smem_k + Traits::kSmemKVElems;
    Element* const smem_ds = smem_v + Traits::kSmemKVElems;
    float* const smem_lse = reinterpret_cast<float*>(smem + Traits::kSmemTileBytes); // [stage][kBlockM]
    float* const smem_dsum = smem_lse + kQStages * kBlockM;
    float* const smem_dq = smem_dsum + kQStages * kBlockM; // (kBlockM, kDqRowStride)
    uint64_t* const bar = reinterpret_cast<uint64_t*>(smem + Traits::kSmemTileBytes + Traits::kSmemRowStatsBytes +
                                                      Traits::kSmemDqBytes);
    uint64_t* const q_full = bar;              // [kQStages] Q, dO, lse, dsum of the stage landed
    uint64_t* const q_empty = bar + kQStages;  // [kQStages] both consumers are done with the stage
    uint64_t* const kv_full = bar + 2 * kQStages;
    uint64_t* const kv_empty = bar + 2 * kQStages + 1;
    uint64_t* const dq_full = bar + 2 * kQStages + 2;  // the consumers' dQ of a block is in smem_dq
    uint64_t* const dq_empty = bar + 2 * kQStages + 3; // the producer has read it
    auto q_stage = [&](Element* base, int s) {
        return make_tensor(make_smem_ptr(base + s * Traits::kSmemQElems), typename Traits::SmemLayoutQ{});
    };
    auto qt_stage = [&](Element* base, int s) {
        return make_tensor(make_smem_ptr(base + s * Traits::kSmemQElems), typename Traits::SmemLayoutQt{});
    };
    Tensor sK = make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutKV{});
    Tensor sV = make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutKV{});
    auto ds_buffer = [&](int buffer) {
        return make_tensor(make_smem_ptr(smem_ds + buffer * Traits::kSmemdSElems), typename Traits::SmemLayoutdS{});
    };
    auto dst_buffer = [&](int buffer) {
        return make_tensor(make_smem_ptr(smem_ds + buffer * Traits::kSmemdSElems), typename Traits::SmemLayoutdSt{});
    };

    if (threadIdx.x == 0) {
        for (int s = 0; s < kQStages; ++s) {
            cutlass::arch::ClusterBarrier::init(q_full + s, Traits::kProducerThreads);
            cutlass::arch::ClusterBarrier::init(q_empty + s, Traits::kConsumerThreads);
        }
        cutlass::arch::ClusterBarrier::init(kv_full, Traits::kProducerThreads);
        cutlass::arch::ClusterBarrier::init(kv_empty, Traits::kConsumerThreads);
        cutlass::arch::ClusterBarrier::init(dq_full, Traits::kConsumerThreads);
        cutlass::arch::ClusterBarrier::init(dq_empty, Traits::kProducerThreads);
        cutlass::arch::fence_barrier_init();
    }
    __syncthreads(); // the last CTA-wide barrier

    // Both roles walk the same sequence: key blocks n of the chunk, and for each the query blocks of
    // q_block_range (empty ranges skip the loads). q_uses counts query blocks over the whole walk
    // (stage q_uses % kQStages, its (q_uses / kQStages)-th use), kv_uses key blocks with work.
    if (warpgroup == 0) {
        // ---------------- producer ----------------
        cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
        const int ptid = int(threadIdx.x);
        typename Traits::GmemLoadProducer gmem_load;
        auto load_thr = gmem_load.get_thread_slice(ptid);
        Tensor tQc = load_thr.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
        Tensor tKVc = load_thr.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
        Tensor column_ok = head_dim_chunks(tKVc, fa.head_dim);
        Tensor gQ = local_tile(rows_of(fa.q, seq.q_row0, h, seq.q_len), Shape<Int<kBlockM>, Int<kHeadDim>>{},
                               make_coord(_, 0));
        Tensor gdO = local_tile(rows_of(args.dout, seq.q_row0, h, seq.q_len), Shape<Int<kBlockM>, Int<kHeadDim>>{},
                                make_coord(_, 0));
        Tensor gK = local_tile(rows_of(fa.k, seq.k_row0, h_kv, seq.k_len), Shape<Int<kBlockN>, Int<kHeadDim>>{},
                               make_coord(_, 0));
        Tensor gV = local_tile(rows_of(fa.v, seq.k_row0, h_kv, seq.k_len), Shape<Int<kBlockN>, Int<kHeadDim>>{},
                               make_coord(_, 0));
        Tensor tQg = load_thr.partition_S(gQ);
        Tensor tdOg = load_thr.partition_S(gdO);
        Tensor tKg = load_thr.partition_S(gK);
        Tensor tVg = load_thr.partition_S(gV);
        // One lse or dsum value per producer thread and stage.
        const bool loads_lse = ptid < kBlockM;
        const int stat_row = loads_lse ? ptid : ptid - kBlockM;
        const float* const stat_rows = (loads_lse ? fa.lse : args.dsum) + row_stat0;
        float* const smem_stat = (loads_lse ? smem_lse : smem_dsum) + stat_row;

        // The dQ of query-block use `use` (first row m0): a warp per row of 512 bytes, added with
        // 16-byte reductions; rows past the sequence belong to other sequences' rows (or to none).
        auto add_dq = [&](int use, int m0) {
            cutlass::arch::ClusterBarrier::wait(dq_full, use & 1);
            const int rows_valid = seq.q_len - m0;
            CUTE_UNROLL
            for (int i = ptid; i < kBlockM * Traits::kDqChunksPerRow; i += Traits::kProducerThreads) {
                const int row = i / Traits::kDqChunksPerRow, col = (i % Traits::kDqChunksPerRow) * 4;
                if (row < rows_valid) {
                    const float4 v = *reinterpret_cast<const float4*>(smem_dq + row * Traits::kDqRowStride + col);
                    red_add_quad(dq_rows + int64_t(m0 + row) * kHeadDim + col, v);
                }
            }
            cutlass::arch::ClusterBarrier::arrive(dq_empty);
        };

        int q_uses = 0, kv_uses = 0, last_m0 = 0;
        for (int n = chunk; n * kBlockN < k_stored; n += args.num_chunks) {
            const int n0 = n * kBlockN;
            const QBlockRange range = q_block_range<kBlockM, kBlockN>(fa.mask, seq, n0);
            if (range.m_end <= range.m_begin) continue;
            const Element* safe = &gK(0, 0, 0); // k_len > n0 >= 0 whenever the range is not empty
            if (kv_uses > 0) cutlass::arch::ClusterBarrier::wait(kv_empty, (kv_uses - 1) & 1);
            produce_tile(tKg(_, _, _, n), load_thr.partition_D(sK), tKVc, column_ok, seq.k_len - n0, safe);
            produce_tile(tVg(_, _, _, n), load_thr.partition_D(sV), tKVc, column_ok, seq.k_len - n0, safe);
            cutlass::arch::cpasync_barrier_arrive_noinc(kv_full);
            ++kv_uses;
            for (int m = range.m_begin; m < range.m_end; ++m, ++q_uses) {
                const int s = q_uses % kQStages;
                const int m0 = m * kBlockM;
                if (q_uses >= kQStages) cutlass::arch::ClusterBarrier::wait(q_empty + s, ((q_uses / kQStages) - 1) & 1);
                produce_tile(tQg(_, _, _, m), load_thr.partition_D(q_stage(smem_q, s)), tQc, column_ok, seq.q_len - m0,
                             safe);
                produce_tile(tdOg(_, _, _, m), load_thr.partition_D(q_stage(smem_do, s)), tQc, column_ok,
                             seq.q_len - m0, safe);
                const bool row_ok = m0 + stat_row < seq.q_len;
                cp_async_4_or_zero(smem_stat + s * kBlockM, row_ok ? stat_rows + m0 + stat_row : stat_rows, row_ok);
                cutlass::arch::cpasync_barrier_arrive_noinc(q_full + s);
                if (q_uses > 0) add_dq(q_uses - 1, last_m0);
                last_m0 = m0;
            }
        }
        if (q_uses > 0) add_dq(q_uses - 1, last_m0);
        cp_async_wait<0>(); // stay resident until the copies land (the barriers are in this CTA)
        return;
    }

    // ---------------- consumers ----------------
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
    const int tid = int(threadIdx.x) - Traits::kProducerThreads; // 0..255 over the two consumers
    constexpr uint32_t kDsReadyBarrier = 0; // cutlass::arch::NamedBarrier adds its reserved offset

    typename Traits::TiledMmaSdP mma_sdp;
    typename Traits::TiledMmaKV mma_kv;
    typename Traits::TiledMmaDq mma_dq;
    auto sdp_thr = mma_sdp.get_thread_slice(tid);
    auto kv_thr = mma_kv.get_thread_slice(tid);
    auto dq_thr = mma_dq.get_thread_slice(tid);

    Tensor acc_dk = partition_fragment_C(mma_kv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
    Tensor acc_dv = partition_fragment_C(mma_kv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
    Tensor acc_s = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
    Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
    Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{});
    // P^T and dS^T in 16 bits: the register A operands of dV, dK (wgmma_ops.cuh).
    Tensor p_storage = make_tensor<Element>(acc_s.layout());
    Tensor ds_storage = make_tensor<Element>(acc_dp.layout());
    Tensor tdVrPt = make_tensor(p_storage.data(), wgmma_accumulator_as_a_operand(acc_s.layout()));
    Tensor tdKrdSt = make_tensor(ds_storage.data(), wgmma_accumulator_as_a_operand(acc_dp.layout()));

    // (query, key) views of the keys x queries accumulators, for the policies.
    Tensor tScS = sdp_thr.partition_C(transposed_identity_tensor<kBlockN, kBlockM>());
    Tensor coords_qk = make_tensor(tScS.data(), transposed(wgmma_rows_cols(tScS.layout())));
    Tensor scores_qk = make_tensor(acc_s.data(), transposed(wgmma_rows_cols(acc_s.layout())));
    Tensor grads_qk = make_tensor(acc_dp.data(), transposed(wgmma_rows_cols(acc_dp.layout())));
    constexpr int kQueries = decltype(size<0>(coords_qk))::value; // query columns per thread (16)
    // dS^T registers -> shared: neighbouring queries in a register pair, 4-byte stores.
    auto copy_ds = make_tiled_copy_C(Copy_Atom<UniversalCopy<uint32_t>, Element>{}, mma_sdp);
    auto copy_ds_thr = copy_ds.get_thread_slice(tid);
    Tensor tdSr = copy_ds_thr.retile_S(ds_storage);
    // (row, col) of the dQ and dK/dV accumulators: registers 2t, 2t+1 are neighbouring columns.
    Tensor tdQc = dq_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor tdKVc = kv_thr.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));

    float alibi_slope = 0.0f;
    if constexpr (kExtras) {
        if (fa.alibi_slopes) alibi_slope = fa.alibi_slopes[int64_t(b) * fa.alibi_batch_stride + h];
    }
    const float exp_scale = kExtras && fa.transform_scores ? kLog2e : fa.scale_log2;
    const int64_t k_global_row0 = varlen ? seq.k_row0 : int64_t(b) * fa.seqlen_k;

    int q_uses = 0, kv_uses = 0;
    for (int n = chunk; n * kBlockN < k_stored; n += args.num_chunks) {
        const int n0 = n * kBlockN;
        const QBlockRange range = q_block_range<kBlockM, kBlockN>(fa.mask, seq, n0);
        clear(acc_dk);
        clear(acc_dv);

        auto process_block = [&](int m, auto masked_tag) __attribute__((always_inline)) {
            constexpr bool kMasked = decltype(masked_tag)::value;
            const int m0 = m * kBlockM;
            const int s = q_uses % kQStages;
            cutlass::arch::ClusterBarrier::wait(q_full + s, (q_uses / kQStages) & 1);
            cutlass::arch::fence_view_async_shared();

            // Descriptors of K, V (loop-invariant) are rebuilt per block from a base the compiler
            // cannot see through: hoisted out of the loop they held ~30 registers (ptxas: spills
            // 412 -> 312 B at d128).
            Element* k_base = smem_k;
            Element* v_base = smem_v;
            asm volatile("" : "+l"(k_base), "+l"(v_base));
            Tensor tSrK = sdp_thr.partition_fragment_A(make_tensor(make_smem_ptr(k_base), typename Traits::SmemLayoutKV{}));
            Tensor tdPrV = sdp_thr.partition_fragment_A(make_tensor(make_smem_ptr(v_base), typename Traits::SmemLayoutKV{}));
            Tensor tdQrKt = dq_thr.partition_fragment_B(make_tensor(make_smem_ptr(k_base), typename Traits::SmemLayoutKt{}));
            Element* const q_base = smem_q;
            Element* const do_base = smem_do;
            Tensor tSrQ = sdp_thr.partition_fragment_B(q_stage(q_base, s));
            Tensor tdPrdO = sdp_thr.partition_fragment_B(q_stage(do_base, s));
            // Zeroed by clear(), not by the wgmma's scale-d: a wgmma reads its accumulator registers
            // as far as the compiler knows, so they would stay live from one block to the next.
            clear(acc_s);
            clear(acc_dp);
            wgmma_issue<false>(mma_sdp, tSrK, tSrQ, acc_s);
            wgmma_issue<false>(mma_sdp, tdPrV, tdPrdO, acc_dp);

            // lse (natural log; -inf: the row saw no key) in log2 units, +inf so that P = 0 there and
            // for columns past the sequence (their Q rows are zeros, their S 0).
            const float* const stage_lse = smem_lse + s * kBlockM;
            const float* const stage_dsum = smem_dsum + s * kBlockM;
            float lse_log2[kQueries];
            CUTE_UNROLL
            for (int q = 0; q < kQueries; ++q) {
                const int i = get<0>(coords_qk(q, 0));
                const float lse = stage_lse[i];
                lse_log2[q] = m0 + i < seq.q_len && lse != -INFINITY ? lse * kLog2e : INFINITY;
            }

            warpgroup_wait<1>(); // S^T (dP^T may still run)
            warpgroup_fence_operand(acc_s);
            if constexpr (kExtras) {
                if (fa.transform_scores) apply_score_transform(scores_qk, coords_qk, fa, alibi_slope, seq, m0, n0);
            }
            if constexpr (kMasked) apply_key_mask(scores_qk, coords_qk, fa.mask, seq, m0, n0);
            CUTE_UNROLL
            for (int q = 0; q < kQueries; ++q) {
                CUTE_UNROLL
                for (int k = 0; k < size<1>(scores_qk); ++k)
                    scores_qk(q, k) = fast_exp2(fmaf(scores_qk(q, k), exp_scale, -lse_log2[q]));
            }
            {
                Tensor p16 = convert_fragment<Element>(acc_s);
                CUTE_UNROLL
                for (int t = 0; t < size(p16); ++t) p_storage(t) = p16(t);
            }
            // dV += P^T dO runs under the dS arithmetic.
            Tensor tdVrdOt = kv_thr.partition_fragment_B(qt_stage(do_base, s));
            wgmma_issue<false>(mma_kv, tdVrPt, tdVrdOt, acc_dv);
            if constexpr (kExtras) {
                if (fa.softcap > 0.0f)
                    apply_softcap_derivative(scores_qk, coords_qk, fa, alibi_slope, seq, m0, n0, lse_log2);
            }

            warpgroup_wait<1>(); // dP^T (dV may still run)
            warpgroup_fence_operand(acc_dp);
            CUTE_UNROLL
            for (int q = 0; q < kQueries; ++q) {
                const float dsum = stage_dsum[get<0>(coords_qk(q, 0))];
                CUTE_UNROLL
                for (int k = 0; k < size<1>(grads_qk); ++k) grads_qk(q, k) = scores_qk(q, k) * (grads_qk(q, k) - dsum);
            }
            {
                Tensor ds16 = convert_fragment<Element>(acc_dp);
                CUTE_UNROLL
                for (int t = 0; t < size(ds16); ++t) ds_storage(t) = ds16(t);
            }

            // dK += dS^T Q, and dS^T to shared memory under it for dQ = dS K.
            Tensor tdKrQt = kv_thr.partition_fragment_B(qt_stage(q_base, s));
            wgmma_issue<false>(mma_kv, tdKrdSt, tdKrQt, acc_dk);
            const int ds_buf = q_uses % Traits::kDsBuffers;
            copy(copy_ds, tdSr, copy_ds_thr.partition_D(dst_buffer(ds_buf)));
            cutlass::arch::fence_view_async_shared(); // dS^T (generic stores) -> the wgmma of dQ
            cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kDsReadyBarrier);
            // dQ queues behind dK on the tensor cores (no wait in between).
            Tensor tdQrdS = dq_thr.partition_fragment_A(ds_buffer(ds_buf));
            clear(acc_dq);
            wgmma_issue<false>(mma_dq, tdQrdS, tdQrKt, acc_dq);
            warpgroup_wait<0>(); // dV, dK, dQ: the stage's Q and dO are read
            warpgroup_fence_operand(acc_dv);
            warpgroup_fence_operand(acc_dk);
            warpgroup_fence_operand(acc_dq);
            cutlass::arch::ClusterBarrier::arrive(q_empty + s);
            // dQ -> shared memory, once the producer has read the previous block's.
            if (q_uses > 0) cutlass::arch::ClusterBarrier::wait(dq_empty, (q_uses - 1) & 1);
            CUTE_UNROLL
            for (int t = 0; t < size(acc_dq); t += 2) {
                const int row = get<0>(tdQc(t)), col = get<1>(tdQc(t));
                *reinterpret_cast<float2*>(smem_dq + row * Traits::kDqRowStride + col) = make_float2(acc_dq(t), acc_dq(t + 1));
            }
            cutlass::arch::ClusterBarrier::arrive(dq_full);
            ++q_uses;
        };

        if (range.m_end > range.m_begin) {
            cutlass::arch::ClusterBarrier::wait(kv_full, kv_uses & 1);
            cutlass::arch::fence_view_async_shared();
            // Masked blocks sit at the two ends of the range: masked, unmasked, masked.
            for (int m = range.m_begin; m < range.m_end;) {
                for (; m < range.m_end && (m < range.unmasked_begin || m >= range.unmasked_end); ++m)
                    process_block(m, cute::true_type{});
                for (; m < range.m_end && m >= range.unmasked_begin && m < range.unmasked_end; ++m)
                    process_block(m, cute::false_type{});
            }
            cutlass::arch::ClusterBarrier::arrive(kv_empty); // every wgmma reading K, V has completed
            ++kv_uses;
        }

        // Epilogue: dK = scale * dS^T Q, dV = (P keep)^T dO / (1-p), from registers (rows past
        // k_len hold zeros: their keys were masked, which is what keys beyond seqused_k receive).
        const int rows_valid = k_stored - n0;
        CUTE_UNROLL
        for (int t = 0; t < size(acc_dk); ++t) {
            acc_dk(t) *= args.dk_scale;
            acc_dv(t) *= args.dv_scale;
        }
        if (args.dk_accum) {
            store_dkv_scratch<kHeadDim>(args, h, k_global_row0 + n0, acc_dk, acc_dv, tdKVc, rows_valid);
        } else {
            // Written only without GQA (the host gives GQA the scratch), so h_kv == h. 16-bit pairs.
            Tensor gdK = local_tile(rows_of(args.dk, seq.k_row0, h_kv, k_stored), Shape<Int<kBlockN>, Int<kHeadDim>>{},
                                    make_coord(n, 0));
            Tensor gdV = local_tile(rows_of(args.dv, seq.k_row0, h_kv, k_stored), Shape<Int<kBlockN>, Int<kHeadDim>>{},
                                    make_coord(n, 0));
            Tensor dk16 = convert_fragment<Element>(acc_dk);
            Tensor dv16 = convert_fragment<Element>(acc_dv);
            Tensor dk_pairs = recast<uint32_t>(dk16);
            Tensor dv_pairs = recast<uint32_t>(dv16);
            CUTE_UNROLL
            for (int t = 0; t < size(acc_dk); t += 2) {
                const int row = get<0>(tdKVc(t)), col = get<1>(tdKVc(t));
                if (row < rows_valid && col < fa.head_dim) {
                    *reinterpret_cast<uint32_t*>(&gdK(row, col)) = dk_pairs(t / 2);
                    *reinterpret_cast<uint32_t*>(&gdV(row, col)) = dv_pairs(t / 2);
                }
            }
        }
    }
#endif // __CUDA_ARCH_FEAT_SM90_ALL
}

} // namespace flashattn::cuda::kernels
