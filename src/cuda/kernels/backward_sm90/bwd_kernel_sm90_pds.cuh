// The Hopper backward with P and dS through shared memory (sm_90a, wgmma, warp-specialised): at head
// dim 256 (the planner's choice there outside deterministic chunks) and at q/k 192 with v 128
// (Sm90BwdPdSTraits' kHeadDimV, tiles::backward_sm90_value_dim). FlashAttention-3's schedule for its
// largest head dims. Same work items, scratch, producer, policies and epilogue as bwd_kernel_sm90.cuh
// (bwd_sm90_common.cuh); the consumers' products differ (the shapes and why: Sm90BwdPdSTraits in
// bwd_traits_sm90.cuh). d = kHeadDim (Q, K, dQ, dK), d_v = kHeadDimV (V, dO, dV).
//
//   warpgroup 0 (producer)      as bwd_kernel_sm90.cuh's: K, V once per key block (kv_full /
//                               kv_empty), Q, dO, lse, dsum per query block into a ring of two
//                               stages (q_full / q_empty); with the dQ hand-off (kDqHandoff) it adds
//                               the consumers' dQ to the scratch (dq_full / dq_empty); without it,
//                               with the ordered dQ, it grants each block's turn (dq_empty) and
//                               publishes the adds (dq_full)
//   warpgroups 1, 2 (consumer)  per query block, consumer c:
//     S = Q K^T, dP = dO V^T         keys [32c, 32c + 32), issued together; the softmax under dP
//     P = exp2(S * scale_log2 - lse_log2[query])          [transform] [mask]
//     P -> shared (16-bit); [softcap derivative]; dS = P (dP - dsum[query]) -> shared
//     named barrier: both consumers' P and dS of the block are in shared memory
//     dQ = dS K, dK += dS^T Q        columns [c d/2, (c+1) d/2) of d
//     dV += P^T dO                   columns [c d_v/2, (c+1) d_v/2) of d_v
//     dQ first, so that it leaves (to the hand-off buffer, or added to the fp32 scratch with
//     red.global.add, one consumer thread per address) while dV and dK still run
//   epilogue: bwd_sm90_store_dkdv (each consumer its columns of the 64 keys).
//
// Dropout is not compiled here (the planner runs the mma.sync kernel for it). Unlike the d128
// schedule, the registers here hold key pairs per query row, as apply_dropout's Philox words come,
// so it could be added as a policy.
//
// The dQ hand-off (bwd_kernel_sm90.cuh's: the consumers store a block's dQ in fp32 to shared memory,
// the producer adds each row with a bulk reduction) where the traits find room for its buffer beside
// two Q/dO stages: at 192 / 128, not at d256, where the 64 KB buffer fits beside one Q and one dO
// stage only (traits, kSmemBytes), and one stage would stall the consumers on every block's 64 KB
// copy. There each consumer adds its own dQ. Deterministic mode then: with the ordered dQ
// (kOrderedDq, its own instance) the consumers wait for each block's turn before their adds (an
// mbarrier the producer completes once the block's counter shows it; normally long before) and
// report them issued, the producer publishes the CTA's arrival; with chunks, each address of a
// chunk's dQ buffer is owned by one consumer thread (the dQ partition covers the tile once, the
// same thread for every query block of the walk) and its adds are in that thread's program order.
// With the hand-off, both are the producer's (bwd_sm90_common.cuh), as in bwd_kernel_sm90.cuh.
//
// Memory model (as bwd_kernel_sm90.cuh): the producer writes shared memory only with cp.async,
// tracked by cp.async.mbarrier.arrive, and TMA, tracked by the stage's byte count; consumers run
// fence.proxy.async after waiting, before wgmma reads. P and dS are ordinary stores, so each writer
// fences (generic -> async proxy) before the named barrier that hands them to the other consumer's
// wgmmas. P and dS are double-buffered: a consumer writes buffer m % 2 only after passing block
// m-1's barrier, which the other consumer reaches only after its wgmmas of block m-2 (the same
// buffer) completed. The dQ hand-off buffer is single, as in bwd_kernel_sm90.cuh: block u's dQ is
// written once the producer has read block u-1's (dq_empty).
// tests/gpu/bwd_sm90_protocol_check.py models it (run_pds).
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
__global__ void __launch_bounds__(Traits::kThreads, 1) bwd_kernel_sm90_pds(const __grid_constant__ Sm90BwdParams params) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    const BwdArgs& args = params.args;
    static_assert(Traits::kPdSSchedule);
    using Element = typename Traits::Element;
    constexpr int kBlockM = Traits::kBlockM;
    constexpr int kBlockN = Traits::kBlockN;
    constexpr int kHeadDim = Traits::kHeadDim;
    constexpr int kHeadDimV = Traits::kHeadDimV;
    constexpr int kQStages = Traits::kQStages;
    constexpr int kPdSBuffers = Traits::kPdSBuffers;
    const FwdArgs& fa = args.fwd;

    const Sm90BwdWork w(args, cute::bool_constant<kOrderedDq>{});
    const SequenceBounds& seq = w.seq;
    if (w.chunk * kBlockN >= w.k_stored) return; // the whole CTA, before any barrier

    extern __shared__ __align__(1024) char smem[];
    const Sm90BwdSmem<Traits> sm(smem);
    Element* const smem_p = sm.scores;                                     // P [kPdSBuffers]
    Element* const smem_ds = sm.scores + kPdSBuffers * Traits::kSmemPdSElems; // dS [kPdSBuffers]
    // (queries, keys) and its (keys, queries) view, of buffer `buffer` of P or dS.
    auto pds_buffer = [&](Element* base, int buffer) {
        return make_tensor(make_smem_ptr(base + buffer * Traits::kSmemPdSElems), typename Traits::SmemLayoutPdS{});
    };
    auto pdst_buffer = [&](Element* base, int buffer) {
        return make_tensor(make_smem_ptr(base + buffer * Traits::kSmemPdSElems), typename Traits::SmemLayoutPdSt{});
    };

    if (sm90_bwd_ran_producer<Traits, kGroupWalk, kOrderedDq>(params, w, sm)) return;

    // ---------------- consumers ----------------
    const int tid = int(threadIdx.x) - Traits::kProducerThreads; // 0..255 over the two consumers
    constexpr uint32_t kPdSReadyBarrier = 0; // cutlass::arch::NamedBarrier adds its reserved offset

    typename Traits::TiledMmaSdP mma_sdp;
    typename Traits::TiledMmaDk mma_dk;
    typename Traits::TiledMmaDv mma_dv;
    typename Traits::TiledMmaDq mma_dq;
    auto sdp_thr = mma_sdp.get_thread_slice(tid);
    auto dk_thr = mma_dk.get_thread_slice(tid);
    auto dv_thr = mma_dv.get_thread_slice(tid);
    auto dq_thr = mma_dq.get_thread_slice(tid);

    Tensor acc_dk = partition_fragment_C(mma_dk, Shape<Int<kBlockN>, Int<kHeadDim>>{});
    Tensor acc_dv = partition_fragment_C(mma_dv, Shape<Int<kBlockN>, Int<kHeadDimV>>{});
    Tensor acc_s = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{});

    // Queries are the rows of S and dP here: the policies see the accumulators as they are.
    Tensor tScS = sdp_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    Tensor coords_qk = make_tensor(tScS.data(), wgmma_rows_cols(tScS.layout()));
    Tensor scores_qk = make_tensor(acc_s.data(), wgmma_rows_cols(acc_s.layout()));
    Tensor grads_qk = make_tensor(acc_dp.data(), wgmma_rows_cols(acc_dp.layout()));
    constexpr int kRows = decltype(size<0>(coords_qk))::value; // query rows per thread (2)
    // P, dS registers -> shared: stmatrix, 16 bytes of neighbouring keys per thread and instruction
    // (as dS^T in bwd_kernel_sm90.cuh).
    auto copy_pds = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_sdp);
    auto copy_pds_thr = copy_pds.get_thread_slice(tid);
    // (row, col) of the dQ and dK/dV accumulators: registers 2t, 2t+1 are neighbouring columns.
    Tensor tdQc = dq_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor tdKc = dk_thr.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    Tensor tdVc = dv_thr.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDimV>>{}));

    // The current query head's ALiBi slope and dQ scratch rows.
    float alibi_slope = 0.0f;
    float* dq_rows = nullptr;
    auto on_head = [&](int head) { // query head w.h_first + head (sm90_bwd_consume)
        if constexpr (kExtras) {
            if (fa.alibi_slopes) alibi_slope = fa.alibi_slopes[int64_t(w.b) * fa.alibi_batch_stride + w.h_first + head];
        }
        if constexpr (!Traits::kDqHandoff) dq_rows = w.template dq_rows_of_head<kHeadDim>(args, w.h_first + head);
    };
    constexpr float kLog2e = 1.4426950408889634f;
    const float exp_scale = kExtras && fa.transform_scores ? kLog2e : fa.scale_log2;

    // Query block m of key block n0's range (sm90_bwd_consume); q_uses counts them over the walk.
    int q_uses = 0;
    auto process_block = [&](int m, int n0, auto masked_tag) __attribute__((always_inline)) {
        constexpr bool kMasked = decltype(masked_tag)::value;
        const int m0 = m * kBlockM;
        const int s = q_uses % kQStages;
        const int buf = q_uses % kPdSBuffers;
        cutlass::arch::ClusterBarrier::wait(sm.q_full + s, (q_uses / kQStages) & 1);
        cutlass::arch::fence_view_async_shared();

        // K, V descriptors are rebuilt per block from a base the compiler cannot see through,
        // as in bwd_kernel_sm90.cuh (hoisted out of the loop, the loop-invariant ones stay live).
        Element* k_base = sm.k;
        Element* v_base = sm.v;
        asm volatile("" : "+l"(k_base), "+l"(v_base));
        Tensor tSrQ = sdp_thr.partition_fragment_A(sm.q_stage(sm.q, s));
        Tensor tSrK = sdp_thr.partition_fragment_B(make_tensor(make_smem_ptr(k_base), typename Traits::SmemLayoutK{}));
        Tensor tdPrdO = sdp_thr.partition_fragment_A(sm.do_stage(sm.d_o, s));
        Tensor tdPrV = sdp_thr.partition_fragment_B(make_tensor(make_smem_ptr(v_base), typename Traits::SmemLayoutV{}));
        // Zeroed by the wgmma's scale-d, not by clear() (bwd_kernel_sm90.cuh says why).
        wgmma_issue<true>(mma_sdp, tSrQ, tSrK, acc_s);
        wgmma_issue<true>(mma_sdp, tdPrdO, tdPrV, acc_dp);

        float lse_log2[kRows];
        sm90_bwd_lse_log2(lse_log2, Sm90BwdStageLse<decltype(coords_qk)>{coords_qk, sm.lse + s * kBlockM, m0, seq.q_len});

        warpgroup_wait<1>(); // S (dP may still run)
        warpgroup_fence_operand(acc_s);
        recompute_probs<kMasked, kExtras>(scores_qk, coords_qk, fa, alibi_slope, seq, m0, n0, exp_scale, lse_log2);
        {
            Tensor p16 = convert_fragment<Element>(acc_s);
            copy(copy_pds, copy_pds_thr.retile_S(p16), copy_pds_thr.partition_D(pds_buffer(smem_p, buf)));
        }
        if constexpr (kExtras) {
            if (fa.softcap > 0.0f)
                apply_softcap_derivative(scores_qk, coords_qk, fa, alibi_slope, seq, m0, n0, lse_log2);
        }

        warpgroup_wait<0>(); // dP
        warpgroup_fence_operand(acc_dp);
        sm90_bwd_dscores(grads_qk, scores_qk, coords_qk, sm.dsum + s * kBlockM);
        {
            Tensor ds16 = convert_fragment<Element>(acc_dp);
            copy(copy_pds, copy_pds_thr.retile_S(ds16), copy_pds_thr.partition_D(pds_buffer(smem_ds, buf)));
        }
        cutlass::arch::fence_view_async_shared(); // P, dS (generic stores) -> the wgmmas below
        cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kPdSReadyBarrier);

        // dQ first: its result leaves while dV and dK run.
        Tensor tdQrdS = dq_thr.partition_fragment_A(pds_buffer(smem_ds, buf));
        Tensor tdQrKt = dq_thr.partition_fragment_B(make_tensor(make_smem_ptr(k_base), typename Traits::SmemLayoutKt{}));
        wgmma_issue<true>(mma_dq, tdQrdS, tdQrKt, acc_dq);
        Tensor tdVrPt = dv_thr.partition_fragment_A(pdst_buffer(smem_p, buf));
        Tensor tdVrdOt = dv_thr.partition_fragment_B(sm.dot_stage(sm.d_o, s));
        wgmma_issue<false>(mma_dv, tdVrPt, tdVrdOt, acc_dv);
        Tensor tdKrdSt = dk_thr.partition_fragment_A(pdst_buffer(smem_ds, buf));
        Tensor tdKrQt = dk_thr.partition_fragment_B(sm.qt_stage(sm.q, s));
        wgmma_issue<false>(mma_dk, tdKrdSt, tdKrQt, acc_dk);

        warpgroup_wait<2>(); // dQ (dV, dK may still run)
        warpgroup_fence_operand(acc_dq);
        if constexpr (Traits::kDqHandoff) {
            sm90_bwd_hand_off_dq<Traits>(sm, acc_dq, tdQc, q_uses);
        } else {
            // Ordered dQ: the adds wait for the block's turn (granted by the producer) and are
            // reported issued (dq_full), for the producer to publish (bwd_sm90_common.cuh).
            if constexpr (kOrderedDq) cutlass::arch::ClusterBarrier::wait(sm.dq_empty, q_uses & 1);
            // Rows past the sequence belong to other sequences' rows (or to none).
            const int rows_valid = seq.q_len - m0;
            float* const dq_block = dq_rows + int64_t(m0) * kHeadDim;
            CUTE_UNROLL
            for (int t = 0; t < size(acc_dq); t += 2) {
                const int row = get<0>(tdQc(t)), col = get<1>(tdQc(t));
                if (row < rows_valid) red_add_pair_v2(dq_block + row * kHeadDim + col, acc_dq(t), acc_dq(t + 1));
            }
            if constexpr (kOrderedDq) cutlass::arch::ClusterBarrier::arrive(sm.dq_full);
        }

        warpgroup_wait<0>(); // dV, dK: the stage's Q and dO, the P / dS buffer are read
        warpgroup_fence_operand(acc_dv);
        warpgroup_fence_operand(acc_dk);
        cutlass::arch::ClusterBarrier::arrive(sm.q_empty + s);
        ++q_uses;
    };

    sm90_bwd_consume<Traits, kGroupWalk>(args, w, sm, acc_dk, acc_dv, tdKc, tdVc, process_block, on_head);
#endif // __CUDA_ARCH_FEAT_SM90_ALL
}

} // namespace flashattn::cuda::kernels
