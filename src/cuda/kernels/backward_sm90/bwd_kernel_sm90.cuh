// The Hopper backward (sm_90a, wgmma, warp-specialised; the planner's backward_sm90): the same
// algorithm, work items, scratch and policies as bwd_kernel.cuh, with FlashAttention-3's schedule.
//
//   warpgroup 0 (producer)      K, V of the key block once (by TMA where dense; kv_full), then for every query block
//                               that meets it Q, dO (by TMA where dense), lse, dsum into a ring of
//                               kQStages stages
//                               (q_full[s]); a stage is refilled once both consumers released it
//                               (q_empty[s]), K/V once they finished the key block (kv_empty).
//                               After loading query block u it adds the consumers' dQ of block u-1
//                               from shared memory to the fp32 scratch (dq_full / dq_empty); with
//                               the ordered dQ its warps 2-3 do that, block u's in its turn
//   warpgroups 1, 2 (consumer)  64 keys each; per query block (bwd_traits_sm90.cuh for the shapes):
//     S^T = K Q^T, dP^T = V dO^T          issued together; the softmax work runs under dP^T
//     P^T = exp2(S^T * scale_log2 - lse_log2[query])     [transform] [mask]
//     dS^T = P^T (dP^T - dsum[query])                    [softcap derivative]
//     dV += P^T dO                        RS wgmma, P^T from registers
//     dS^T -> shared; both consumers' dS complete (named barrier); dQ = dS K (half the columns,
//     at d64 half the query rows, at d128's 80 rows transposed, half the head dim, each), then
//     dK += dS^T Q (RS, dS^T from registers); once dQ is done, dQ -> shared under dK, for the
//     producer to add to the fp32 scratch with bulk reductions, a row each.
//     Deterministic mode: either the ordered dQ (kOrderedDq, its own instance: one CTA per key
//     block as by default, each query block's additions in a fixed key-block order under a counter,
//     bwd_sm90_common.cuh), or per-chunk buffers as bwd_kernel.cuh (a CTA walks several key blocks,
//     added with red.add: every address by one producer thread, in order)
//   epilogue: dK *= scale, dV *= 1/(1-p), to dk/dv (16-bit; the last key block through K's and V's
//   tiles, by TMA where dense) or to the per-query-head fp32 scratch.
//
// kGroupWalk (GQA, planner's kv_major): the CTA's item is a KV head, and for each key block the
// producer and the consumers walk every query head of its group in turn, so dK/dV sum the group in
// registers and are written once. Its own instance: the walk's loop costs the consumers registers
// (ptxas spills 84 -> 244 B at d128), which a grid over query heads should not pay.
//
// Dropout is not supported here (the launcher runs the mma.sync kernel for it): its Philox words
// come in key pairs (j, j+1) per query row, and this kernel's registers hold query pairs.
//
// Memory model (as fwd_kernel_sm90.cuh): the producer writes shared memory only with cp.async
// (zero-fill past the tensor), tracked by cp.async.mbarrier.arrive, and TMA (zero-fill outside the
// map), tracked by the stage's byte count; consumers run fence.proxy.async after waiting, before
// wgmma reads. dQ is written with ordinary stores and read by the producer's bulk reductions (async
// proxy): each writer fences before arriving on dq_full. dS^T is written with ordinary stores, so each writer fences
// (generic -> async proxy) before the named barrier that hands it to the other consumer's wgmma.
// dS is double-buffered: a consumer writes dS[m] only after passing block m-1's barrier, which the
// other consumer reaches only after its dQ wgmma of block m-2 (the same buffer) completed. The dQ
// buffer is single: consumers write block u's once the producer has read block u-1's (dq_empty:
// its bulk reductions have read the buffer), which it does right after loading block u, so the wait
// is normally long over; with the ordered dQ it does so once block u-1's turn has come, so there the
// consumers can wait behind a predecessor CTA that lags.
// tests/gpu/bwd_sm90_protocol_check.py models all of it.
//
// Index bookkeeping: accumulators of S^T / dP^T are (key row, query column) per warpgroup; the
// policies of the mma.sync kernel take (query row, key column) tensors, which are the transposed
// views `scores_qk` / `coords_qk` below (coordinates generated as (query, key) directly).
//
// The work item, shared-memory carve-up, producer, recomputed P / dS and the dK/dV epilogue are
// bwd_sm90_common.cuh's, shared with the d256 schedule (bwd_kernel_sm90_pds.cuh).
#pragma once

#include "kernels/bwd_args.h"
#include "kernels/backward_sm90/bwd_sm90_common.cuh"
#include "kernels/backward_sm90/bwd_traits_sm90.cuh"
#if FLASHATTN_KERNEL_CODE
#include "device/wgmma_ops.cuh"

#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>
#endif

namespace flashattn::cuda::kernels {

using namespace cute;

template <typename Traits, bool kExtras, bool kGroupWalk, bool kOrderedDq = false>
__global__ void __launch_bounds__(Traits::kThreads, 1) bwd_kernel_sm90(const __grid_constant__ Sm90BwdParams params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const BwdArgs& args = params.args;
    using Element = typename Traits::Element;
    constexpr int kBlockM = Traits::kBlockM;
    constexpr int kBlockN = Traits::kBlockN;
    constexpr int kHeadDim = Traits::kHeadDim;
    constexpr int kQStages = Traits::kQStages;
    const FwdArgs& fa = args.fwd;

    const Sm90BwdWork w(args, cute::bool_constant<kOrderedDq>{});
    const SequenceBounds& seq = w.seq;
    const int chunk = w.chunk;
    const int k_stored = w.k_stored;
    if (chunk * kBlockN >= k_stored) return; // the whole CTA, before any barrier

    // Shared memory (bwd_traits_sm90.cuh, bwd_sm90_common.cuh).
    extern __shared__ __align__(1024) char smem[];
    const Sm90BwdSmem<Traits> sm(smem);
    Element* const smem_k = sm.k;
    Element* const smem_v = sm.v;
    Element* const smem_ds = sm.scores; // dS^T [kDsBuffers]
    auto ds_buffer = [&](int buffer) {
        return make_tensor(make_smem_ptr(smem_ds + buffer * Traits::kSmemdSElems), typename Traits::SmemLayoutdS{});
    };
    auto dst_buffer = [&](int buffer) {
        return make_tensor(make_smem_ptr(smem_ds + buffer * Traits::kSmemdSElems), typename Traits::SmemLayoutdSt{});
    };

    if (sm90_bwd_ran_producer<Traits, kGroupWalk, kOrderedDq>(params, w, sm)) return;

    // ---------------- consumers ----------------
    const int tid = int(threadIdx.x) - Traits::kProducerThreads; // 0..255 over the two consumers
    constexpr uint32_t kDsReadyBarrier = 0; // cutlass::arch::NamedBarrier adds its reserved offset

    typename Traits::TiledMmaSdP mma_sdp;
    typename Traits::TiledMmaKV mma_kv;
    typename Traits::TiledMmaDq mma_dq;
    auto sdp_thr = mma_sdp.get_thread_slice(tid);
    auto kv_thr = mma_kv.get_thread_slice(tid);
    auto dq_thr = mma_dq.get_thread_slice(tid);
    auto sdp_ops = sm90_bwd_operand_slice<Traits>(mma_sdp); // (the operands' descriptors)
    auto kv_ops = sm90_bwd_operand_slice<Traits>(mma_kv);
    auto dq_ops = sm90_bwd_operand_slice<Traits>(mma_dq);

    Tensor acc_dk = partition_fragment_C(mma_kv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
    Tensor acc_dv = partition_fragment_C(mma_kv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
    Tensor acc_s = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
    Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kBlockN>, Int<kBlockM>>{});
    Tensor acc_dq = partition_fragment_C(mma_dq, typename Traits::DqShape{});
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
    constexpr int kQueries = decltype(size<0>(coords_qk))::value; // query columns per thread (kBlockM / 4)
    // dS^T registers -> shared: stmatrix, 16 bytes of neighbouring queries per thread and
    // instruction from a 32-bit shared address (4-byte stores came out as generic stores with the
    // swizzle computed on 64-bit addresses, ~6 instructions each). The buffer's tensor is taken in
    // its position-independent form (the swizzle on the element offset, not the pointer): the five
    // stores' addresses then cost ~35 instructions a block less at d128.
    auto copy_ds = make_tiled_copy_C(typename Traits::SmemCopyAtomdS{}, mma_sdp);
    auto copy_ds_thr = copy_ds.get_thread_slice(tid);
    Tensor tdSr = copy_ds_thr.retile_S(ds_storage);
    // (row, col) of the dQ and dK/dV accumulators: registers 2t, 2t+1 are neighbouring columns.
    Tensor tdQc = dq_thr.partition_C(make_identity_tensor(typename Traits::DqShape{}));
    Tensor tdKVc = kv_thr.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));

    float alibi_slope = 0.0f; // of the current query head
    auto on_head = [&](int head) { // query head w.h_first + head (sm90_bwd_consume)
        if constexpr (kExtras) {
            if (fa.alibi_slopes) alibi_slope = fa.alibi_slopes[int64_t(w.b) * fa.alibi_batch_stride + w.h_first + head];
        }
    };
    constexpr float kLog2e = 1.4426950408889634f;
    const float exp_scale = kExtras && fa.transform_scores ? kLog2e : fa.scale_log2;

    // The key block's keys' query rows, taken once for its masked blocks (tile_key_queries), at d64:
    // the masked block 836 -> 739 instructions (deterministic 2-4% faster on the H200, causal 1k 1%).
    // At d128 the per-block form (block_key_mask) compiles to a masked block as short (613), and
    // holding them as well made the 1k kernels 0.2-1% slower, dense ones too (registers).
    constexpr bool kHoldKeyQueries = kHeadDim <= 64;
    [[maybe_unused]] decltype(tile_key_queries(coords_qk, fa.mask, seq, 0)) key_queries;
    auto on_key_block = [&](int n0) {
        if constexpr (kHoldKeyQueries) key_queries = tile_key_queries(coords_qk, fa.mask, seq, n0);
    };

    // Query block m of key block n0's range (sm90_bwd_consume); q_uses counts them over the walk.
    int q_uses = 0;
    auto process_block = [&](int m, int n0, auto masked_tag) __attribute__((always_inline)) {
        constexpr bool kMasked = decltype(masked_tag)::value;
        const int m0 = m * kBlockM;
        const int s = q_uses % kQStages;
        cutlass::arch::ClusterBarrier::wait(sm.q_full + s, (q_uses / kQStages) & 1);
        cutlass::arch::fence_view_async_shared();

        // Descriptors of K, V (loop-invariant) are rebuilt per block, in uniform registers (the
        // operand slices), from a base the compiler cannot see through: hoisted out of the loop
        // they held vector registers (d128: spills 412 -> 312 B), and with uniform ones hoisted at
        // d64 ptxas serialised the wgmmas (C7512).
        Element* k_base = smem_k;
        Element* v_base = smem_v;
        asm volatile("" : "+l"(k_base), "+l"(v_base));
        Tensor tSrK = sdp_ops.partition_fragment_A(make_tensor(make_smem_ptr(k_base), typename Traits::SmemLayoutKV{}));
        Tensor tdPrV = sdp_ops.partition_fragment_A(make_tensor(make_smem_ptr(v_base), typename Traits::SmemLayoutKV{}));
        // K^T: dQ's B, or transposed dQ's A (the head dim as M).
        auto tdQrKt = [&]() {
            Tensor kt = make_tensor(make_smem_ptr(k_base), typename Traits::SmemLayoutKt{});
            if constexpr (Traits::kDqTransposed) return dq_ops.partition_fragment_A(kt);
            else return dq_ops.partition_fragment_B(kt);
        }();
        Element* const q_base = sm.q;
        Element* const do_base = sm.d_o;
        Tensor tSrQ = sdp_ops.partition_fragment_B(sm.q_stage(q_base, s));
        Tensor tdPrdO = sdp_ops.partition_fragment_B(sm.do_stage(do_base, s));
        // Zeroed by the wgmma's scale-d (the first k step ignores the accumulator), not by
        // clear(): at d128 the 32 register moves of clear(acc_dq) between dK's and dQ's issue
        // made ptxas serialize every wgmma of the kernel (C7512, "insufficient register
        // resources": each k step waited for the previous one), and clear(acc_dp) after S's
        // issue cost an injected wait (C7517) between S and dP at every head dim.
        wgmma_issue<true>(mma_sdp, tSrK, tSrQ, acc_s);
        wgmma_issue<true>(mma_sdp, tdPrV, tdPrdO, acc_dp);

        // Registers to spare: at 64-query blocks (16 query columns a thread) the lse values are
        // read under the products and dV += P^T dO runs under the dS arithmetic. At 128-query
        // blocks (32 each) S^T and dP^T hold 64 fp32 each: the lse is read as P uses it, and dV is
        // issued after dS (below); either, kept as at 64, left ptxas too few registers, and it
        // serialised every wgmma of the kernel (C7512).
        constexpr bool kRoomy = kQueries <= 16;
        const Sm90BwdStageLse<decltype(coords_qk)> stage_lse{coords_qk, sm.lse + s * kBlockM};
        [[maybe_unused]] float lse_array[kRoomy ? kQueries : 1];
        if constexpr (kRoomy) sm90_bwd_lse_log2(lse_array, stage_lse);
        const auto& lse_log2 = first_if<kRoomy>(lse_array, stage_lse);

        warpgroup_wait<1>(); // S^T (dP^T may still run)
        warpgroup_fence_operand(acc_s);
        auto key_mask = [&]() {
            if constexpr (kHoldKeyQueries) return tile_key_mask(key_queries, seq, m0);
            else return block_key_mask(fa.mask, seq, m0, n0);
        }();
        recompute_probs<kMasked, kExtras>(scores_qk, coords_qk, fa, alibi_slope, seq, m0, n0, exp_scale, lse_log2,
                                          key_mask);
        auto to_p16 = [&]() {
            Tensor p16 = convert_fragment<Element>(acc_s);
            CUTE_UNROLL
            for (int t = 0; t < size(p16); ++t) p_storage(t) = p16(t);
        };
        auto issue_dv = [&]() {
            Tensor tdVrdOt = kv_ops.partition_fragment_B(sm.dot_stage(do_base, s));
            wgmma_issue<false>(mma_kv, tdVrPt, tdVrdOt, acc_dv);
        };
        // dV under the dS arithmetic, the softcap derivative into P before dS; else (P^T and dV
        // pinned by that wgmma beside S^T and dP^T were too many registers) dS first, the
        // derivative scaling dS, P^T made from S^T's registers only then, dV issued beside dK.
        if constexpr (kRoomy) {
            to_p16();
            issue_dv();
            if constexpr (kExtras) {
                if (fa.softcap > 0.0f)
                    apply_softcap_derivative(scores_qk, coords_qk, fa, alibi_slope, seq, m0, n0, lse_log2);
            }
        }

        warpgroup_wait<kRoomy ? 1 : 0>(); // dP^T (dV may still run)
        warpgroup_fence_operand(acc_dp);
        sm90_bwd_dscores(grads_qk, scores_qk, coords_qk, sm.dsum + s * kBlockM);
        if constexpr (!kRoomy) {
            if constexpr (kExtras) {
                if (fa.softcap > 0.0f)
                    scale_by_softcap_derivative(grads_qk, scores_qk, coords_qk, fa, alibi_slope, seq, m0, n0, lse_log2);
            }
            to_p16();
        }
        {
            Tensor ds16 = convert_fragment<Element>(acc_dp);
            CUTE_UNROLL
            for (int t = 0; t < size(ds16); ++t) ds_storage(t) = ds16(t);
        }
        if constexpr (!kRoomy) issue_dv();

        // dS^T to shared memory under dV, for dQ = dS K. dQ is issued before dK += dS^T Q, so that
        // dK runs on the tensor cores while this consumer hands dQ off (its stores, fence and
        // barrier arrival): the consumers meet at the dS barrier every block, and with dK first
        // both reached the hand-off with nothing of theirs in flight (docs/perf-log.md, "dQ
        // before dK": 0-7.5% faster at d64 / d128).
        Tensor tdKrQt = kv_ops.partition_fragment_B(sm.qt_stage(q_base, s));
        const int ds_buf = q_uses % Traits::kDsBuffers;
        copy(copy_ds, tdSr, copy_ds_thr.partition_D(as_position_independent_swizzle_tensor(dst_buffer(ds_buf))));
        cutlass::arch::fence_view_async_shared(); // dS^T (generic stores) -> the wgmma of dQ
        cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kDsReadyBarrier);
        // With dQ transposed (80-query blocks: dQ^T 40 fp32 a thread beside dK, dV 64 each) dV is
        // done before dQ's issue, so that three products' accumulators and operands are not pinned
        // at once (ptxas serialised every wgmma for that, C7512).
        if constexpr (Traits::kDqTransposed) {
            warpgroup_wait<0>();
            warpgroup_fence_operand(acc_dv);
            Tensor tdQrdS = dq_ops.partition_fragment_B(ds_buffer(ds_buf));
            wgmma_issue<true>(mma_dq, tdQrKt, tdQrdS, acc_dq); // dQ^T = K^T dS^T
        } else {
            Tensor tdQrdS = dq_ops.partition_fragment_A(ds_buffer(ds_buf));
            wgmma_issue<true>(mma_dq, tdQrdS, tdQrKt, acc_dq);
        }
        wgmma_issue<false>(mma_kv, tdKrdSt, tdKrQt, acc_dk);
        warpgroup_wait<1>(); // dV, dQ (dK may still run)
        warpgroup_fence_operand(acc_dq);
        sm90_bwd_hand_off_dq<Traits, kOrderedDq>(sm, acc_dq, tdQc, q_uses);
        warpgroup_wait<0>(); // dK: the stage's Q and dO are read
        warpgroup_fence_operand(acc_dv);
        warpgroup_fence_operand(acc_dk);
        cutlass::arch::ClusterBarrier::arrive(sm.q_empty + s);
        ++q_uses;
    };

    sm90_bwd_consume<Traits, kGroupWalk>(params, w, sm, acc_dk, acc_dv, tdKVc, tdKVc, process_block, on_key_block, on_head);
#endif // __CUDA_ARCH_FEAT_SM90_ALL
}

} // namespace flashattn::cuda::kernels
