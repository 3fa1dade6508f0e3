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
//                               the consumers' dQ to the scratch (dq_full / dq_empty)
//   warpgroups 1, 2 (consumer)  per query block, consumer c (n = kBlockN / 2 keys each):
//     S = Q K^T, dP = dO V^T         keys [n c, n (c + 1)), issued together; the softmax under dP
//     P = exp2(S * scale_log2 - lse_log2[query])          [transform] [mask]
//     [one P/dS buffer: named barrier, both consumers' products of the block before completed]
//     P -> shared (16-bit); [softcap derivative]; dS = P (dP - dsum[query]) -> shared
//     named barrier: both consumers' P and dS of the block are in shared memory
//     dQ = dS K                      columns [c d/2, (c+1) d/2) of d
//     dK += dS^T Q, dV += P^T dO     columns [c d/2, (c+1) d/2) of d, [c d_v/2, (c+1) d_v/2) of d_v;
//                                    transposed at 192 / 128's 96-key blocks: dK^T += Q^T dS,
//                                    dV^T += dO^T P, its keys [n c, n (c + 1)) (Sm90BwdPdSTraits)
//     dQ to the hand-off buffer once it completes (dV and dK still run), or staged (below) once all
//     three have
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
// copy. There each consumer stages its dQ over its own halves of the block's Q/dO stage and adds
// it with bulk tensor reductions (kDqStaged; the kernel body says how, and how deterministic mode
// orders them). With the hand-off, the ordered dQ and the chunks are the producer's
// (bwd_sm90_common.cuh), as in bwd_kernel_sm90.cuh.
//
// Memory model (as bwd_kernel_sm90.cuh): the producer writes shared memory only with cp.async,
// tracked by cp.async.mbarrier.arrive, and TMA, tracked by the stage's byte count; consumers run
// fence.proxy.async after waiting, before wgmma reads. P and dS are ordinary stores, so each writer
// fences (generic -> async proxy) before the named barrier that hands them to the other consumer's
// wgmmas. P and dS are double-buffered: a consumer writes buffer m % 2 only after passing block
// m-1's barrier, which the other consumer reaches only after its wgmmas of block m-2 (the same
// buffer) completed; with one buffer (kPdSBuffers, 192 / 128) a consumer writes block m's only
// after a barrier that the other passes only after its wgmmas of block m-1 completed. The dQ
// hand-off buffer is single, as in bwd_kernel_sm90.cuh: block u's dQ is written once the producer
// has read block u-1's (dq_empty). Staged dQ is written with ordinary
// stores over stage halves that wgmma read (a consumer barrier after every warp's wait for them),
// fenced to the async proxy before the arrival on dq_staged[s] after which the producer reduces
// from them; the stage is refilled only after the producer's own q_empty arrival, which follows
// the reductions' read.
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
    // With one P/dS buffer: both consumers' products of the block before (its readers) completed.
    constexpr uint32_t kPdSFreeBarrier = 4; // (1: the epilogue, 2 and 3: staged dQ)

    typename Traits::TiledMmaSdP mma_sdp;
    typename Traits::TiledMmaDk mma_dk;
    typename Traits::TiledMmaDv mma_dv;
    typename Traits::TiledMmaDq mma_dq;
    auto sdp_thr = mma_sdp.get_thread_slice(tid);
    auto dk_thr = mma_dk.get_thread_slice(tid);
    auto dv_thr = mma_dv.get_thread_slice(tid);
    auto dq_thr = mma_dq.get_thread_slice(tid);
    auto sdp_ops = sm90_bwd_operand_slice<Traits>(mma_sdp); // (the operands' descriptors)
    auto dk_ops = sm90_bwd_operand_slice<Traits>(mma_dk);
    auto dv_ops = sm90_bwd_operand_slice<Traits>(mma_dv);
    auto dq_ops = sm90_bwd_operand_slice<Traits>(mma_dq);

    using DkShape = typename Traits::template DkvShape<kHeadDim>; // (keys, d), or transposed (d, keys)
    using DvShape = typename Traits::template DkvShape<kHeadDimV>;
    Tensor acc_dk = partition_fragment_C(mma_dk, DkShape{});
    Tensor acc_dv = partition_fragment_C(mma_dv, DvShape{});
    Tensor acc_s = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor acc_dq = partition_fragment_C(mma_dq, Shape<Int<kBlockM>, Int<kHeadDim>>{});

    // Queries are the rows of S and dP here: the policies see the accumulators as they are.
    Tensor tScS = sdp_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    Tensor coords_qk = make_tensor(tScS.data(), wgmma_rows_cols(tScS.layout()));
    Tensor scores_qk = make_tensor(acc_s.data(), wgmma_rows_cols(acc_s.layout()));
    Tensor grads_qk = make_tensor(acc_dp.data(), wgmma_rows_cols(acc_dp.layout()));
    constexpr int kRows = decltype(size<0>(coords_qk))::value; // query rows per thread (2)
    // P, dS registers -> shared: stmatrix, 16 bytes of neighbouring keys per thread and instruction,
    // into position-independent views of the buffers (as dS^T in bwd_kernel_sm90.cuh).
    auto copy_pds = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_sdp);
    auto copy_pds_thr = copy_pds.get_thread_slice(tid);
    // (row, col) of the dQ and dK/dV accumulators: registers 2t, 2t+1 are neighbouring columns
    // (transposed dK/dV: (column, key), 2t and 2t+1 neighbouring keys; the epilogue knows).
    Tensor tdQc = dq_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor tdKc = dk_thr.partition_C(make_identity_tensor(DkShape{}));
    Tensor tdVc = dv_thr.partition_C(make_identity_tensor(DvShape{}));

    // The current query head's ALiBi slope and index.
    float alibi_slope = 0.0f;
    int dq_head = w.h_first;
    auto on_head = [&](int head) { // query head w.h_first + head (sm90_bwd_consume)
        if constexpr (kExtras) {
            if (fa.alibi_slopes) alibi_slope = fa.alibi_slopes[int64_t(w.b) * fa.alibi_batch_stride + w.h_first + head];
        }
        if constexpr (Traits::kDqStaged) dq_head = w.h_first + head;
    };

    // dQ staged in the stage (Traits::kDqStaged; without the hand-off). Consumer c's 64 x 128 fp32 of
    // a block go, once its dV and dK of the block have completed (the only readers of its halves of
    // the stage's dO and Q after the P/dS barrier), to kDqBoxes boxes of 32 columns in the 128-byte
    // swizzle, the first half over its dO half, the rest over its Q half; then it arrives on
    // dq_staged[s] and q_empty and goes on. The producer's dQ thread adds the boxes with bulk tensor
    // reductions and releases the stage once they have read it (its own q_empty arrival), ordering
    // them where deterministic mode asks for it (bwd_sm90_common.cuh). Blocks of packed (varlen) rows
    // that end past their sequence (a box would reach into the next sequence's rows) and launches
    // without the map add their rows from the stage here (add_staged_dq; one thread per address, so
    // deterministic chunks keep their order); with the ordered dQ each consumer's first thread waits
    // for the turn before and counts the consumer's adds after them (one arrival each; two per key
    // block, as the producer's).
    const int consumer = tid / 128;
    const bool dq_issuer = tid % 128 == 0;
    const uint32_t staged_barrier = 2 + consumer; // one per consumer (0: P/dS ready, 1: the epilogue)
    // The counter of query block m of the current query head (on the group walk, dq_head's).
    auto dq_counter = [&](int m) { return w.dq_counter(args, dq_head, m); };
    auto wait_turn = [&](int m) { // the issuer, before its consumer's adds to query block m
        const int turn = Traits::kConsumerWarpGroups * w.template dq_rank<kBlockM, kBlockN>(args, m);
        while (load_acquire_gpu(dq_counter(m)) < turn) {}
    };
    // acc_dq -> consumer's boxes of stage s. wgmma's accumulator layout: register v = v0 + 2 h + 4 j
    // holds row row0 + 8 h, column col0 + v0 + 8 j (col0 even, below 8 in the consumer's columns), so
    // a thread's rows share row % 8 and its 16-byte chunk of a 32-column row is (col % 32) / 4 =
    // col0 / 4 + 2 (j % 4): the swizzled chunk (XOR row % 8) is 2 (j % 4) XOR a thread constant.
    auto store_staged_dq = [&](int s) {
        int row0 = get<0>(tdQc(0)), col0 = get<1>(tdQc(0)) % Traits::kColsPerWarpGroup;
        asm volatile("" : "+r"(row0), "+r"(col0)); // computed here, not held across the main loop
        const int chunk_xor = (col0 / 4) ^ (row0 % 8);
        const uint32_t thread_offset = row0 * 128 + (col0 % 4) * 4 + consumer * Traits::kStageHalfBytes;
        const uint32_t do_half = cast_smem_ptr_to_uint(sm.d_o + s * Traits::kSmemDoElems) + thread_offset;
        const uint32_t q_half = cast_smem_ptr_to_uint(sm.q + s * Traits::kSmemQElems) + thread_offset;
        constexpr int kHalfBoxes = Traits::kDqBoxes / 2;
        static_assert(size(decltype(acc_dq){}) == 4 * (Traits::kColsPerWarpGroup / 8),
                      "(2, 2, columns / 8) per thread");
        CUTE_UNROLL
        for (int j = 0; j < Traits::kColsPerWarpGroup / 8; ++j) {
            const int box = j / 4;
            const uint32_t at = (box < kHalfBoxes ? do_half : q_half) + (box % kHalfBoxes) * Traits::kDqBoxBytes +
                                uint32_t(((2 * (j % 4)) ^ chunk_xor) * 16);
            CUTE_UNROLL
            for (int h = 0; h < 2; ++h)
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(at + h * 8 * 128), "f"(acc_dq(4 * j + 2 * h)),
                             "f"(acc_dq(4 * j + 2 * h + 1))
                             : "memory");
        }
    };
    // The fallback: the consumer's threads add the staged boxes' rows of the sequence themselves, a
    // warp a row at a time (lane l: columns 4 l .. 4 l + 3, one 16-byte chunk of box l / 8).
    auto add_staged_dq = [&](int s, int m0) {
        constexpr int kHalfBoxes = Traits::kDqBoxes / 2;
        int ctid = tid;
        asm volatile("" : "+r"(ctid)); // its addresses computed here, not held across the main loop
        const int lane = ctid % 32, box = lane / 8, chunk = lane % 8, consumer = ctid / 128;
        const uint32_t half = box < kHalfBoxes ? cast_smem_ptr_to_uint(sm.d_o + s * Traits::kSmemDoElems)
                                               : cast_smem_ptr_to_uint(sm.q + s * Traits::kSmemQElems);
        const uint32_t box_at = half + consumer * Traits::kStageHalfBytes + (box % kHalfBoxes) * Traits::kDqBoxBytes;
        const int rows_valid = min(seq.q_len - m0, kBlockM);
        float* const dq_block = w.template dq_rows_of_head<kHeadDim>(args, dq_head) + int64_t(m0) * kHeadDim +
                                consumer * Traits::kColsPerWarpGroup + 4 * lane;
        static_assert(!Traits::kDqStaged || Traits::kColsPerWarpGroup == 4 * 32,
                      "a warp's 32 lanes cover a row of the consumer's columns");
        for (int row = (ctid % 128) / 32; row < rows_valid; row += 4) {
            float4 v;
            asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                         : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                         : "r"(box_at + row * 128 + ((chunk ^ (row % 8)) * 16)));
            red_add_quad(dq_block + int64_t(row) * kHeadDim, v);
        }
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
        Tensor tSrQ = sdp_ops.partition_fragment_A(sm.q_stage(sm.q, s));
        Tensor tSrK = sdp_ops.partition_fragment_B(make_tensor(make_smem_ptr(k_base), typename Traits::SmemLayoutK{}));
        Tensor tdPrdO = sdp_ops.partition_fragment_A(sm.do_stage(sm.d_o, s));
        Tensor tdPrV = sdp_ops.partition_fragment_B(make_tensor(make_smem_ptr(v_base), typename Traits::SmemLayoutV{}));
        // Zeroed by the wgmma's scale-d, not by clear() (bwd_kernel_sm90.cuh says why).
        wgmma_issue<true>(mma_sdp, tSrQ, tSrK, acc_s);
        wgmma_issue<true>(mma_sdp, tdPrdO, tdPrV, acc_dp);

        float lse_log2[kRows];
        sm90_bwd_lse_log2(lse_log2, Sm90BwdStageLse<decltype(coords_qk)>{coords_qk, sm.lse + s * kBlockM});

        warpgroup_wait<1>(); // S (dP may still run)
        warpgroup_fence_operand(acc_s);
        recompute_probs<kMasked, kExtras>(scores_qk, coords_qk, fa, alibi_slope, seq, m0, n0, exp_scale, lse_log2,
                                          block_key_mask(fa.mask, seq, m0, n0));
        if constexpr (kPdSBuffers == 1) cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kPdSFreeBarrier);
        {
            Tensor p16 = convert_fragment<Element>(acc_s);
            copy(copy_pds, copy_pds_thr.retile_S(p16), copy_pds_thr.partition_D(as_position_independent_swizzle_tensor(pds_buffer(smem_p, buf))));
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
            copy(copy_pds, copy_pds_thr.retile_S(ds16), copy_pds_thr.partition_D(as_position_independent_swizzle_tensor(pds_buffer(smem_ds, buf))));
        }
        cutlass::arch::fence_view_async_shared(); // P, dS (generic stores) -> the wgmmas below
        cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kPdSReadyBarrier);

        // dQ first: its result leaves while dV and dK run.
        Tensor tdQrdS = dq_ops.partition_fragment_A(pds_buffer(smem_ds, buf));
        Tensor tdQrKt = dq_ops.partition_fragment_B(make_tensor(make_smem_ptr(k_base), typename Traits::SmemLayoutKt{}));
        wgmma_issue<true>(mma_dq, tdQrdS, tdQrKt, acc_dq);
        if constexpr (Traits::kDkvTransposed) { // dV^T += dO^T P, dK^T += Q^T dS: P, dS as (keys, queries) B
            Tensor tdVrdOt = dv_ops.partition_fragment_A(sm.dot_stage(sm.d_o, s));
            Tensor tdVrP = dv_ops.partition_fragment_B(pdst_buffer(smem_p, buf));
            wgmma_issue<false>(mma_dv, tdVrdOt, tdVrP, acc_dv);
            Tensor tdKrQt = dk_ops.partition_fragment_A(sm.qt_stage(sm.q, s));
            Tensor tdKrdS = dk_ops.partition_fragment_B(pdst_buffer(smem_ds, buf));
            wgmma_issue<false>(mma_dk, tdKrQt, tdKrdS, acc_dk);
        } else {
            Tensor tdVrPt = dv_ops.partition_fragment_A(pdst_buffer(smem_p, buf));
            Tensor tdVrdOt = dv_ops.partition_fragment_B(sm.dot_stage(sm.d_o, s));
            wgmma_issue<false>(mma_dv, tdVrPt, tdVrdOt, acc_dv);
            Tensor tdKrdSt = dk_ops.partition_fragment_A(pdst_buffer(smem_ds, buf));
            Tensor tdKrQt = dk_ops.partition_fragment_B(sm.qt_stage(sm.q, s));
            wgmma_issue<false>(mma_dk, tdKrdSt, tdKrQt, acc_dk);
        }

        if constexpr (Traits::kDqHandoff) {
            warpgroup_wait<2>(); // dQ (dV, dK may still run)
            warpgroup_fence_operand(acc_dq);
            sm90_bwd_hand_off_dq<Traits, kOrderedDq>(sm, acc_dq, tdQc, q_uses);
            warpgroup_wait<0>(); // dV, dK: the stage's Q and dO, the P / dS buffer are read
            warpgroup_fence_operand(acc_dv);
            warpgroup_fence_operand(acc_dk);
            cutlass::arch::ClusterBarrier::arrive(sm.q_empty + s);
        } else {
            warpgroup_wait<0>(); // dQ, dV, dK
            warpgroup_fence_operand(acc_dq);
            warpgroup_fence_operand(acc_dv);
            warpgroup_fence_operand(acc_dk);
            cutlass::arch::NamedBarrier::sync(128, staged_barrier); // every warp's dV, dK read the halves
            store_staged_dq(s);
            if (!sm90_bwd_dq_by_tma<kBlockM>(params, w, m0)) { // the producer adds the others
                if constexpr (kOrderedDq) {
                    if (dq_issuer) wait_turn(m);
                }
                cutlass::arch::NamedBarrier::sync(128, staged_barrier); // the stores (and the turn)
                add_staged_dq(s, m0);
                if constexpr (kOrderedDq) {
                    cutlass::arch::NamedBarrier::sync(128, staged_barrier); // the consumer's adds before its count
                    if (dq_issuer) add_release_gpu(dq_counter(m), 1);
                }
            }
            cutlass::arch::fence_view_async_shared(); // dQ (generic stores) -> the producer's bulk reductions
            cutlass::arch::ClusterBarrier::arrive(sm.dq_staged + s);
            cutlass::arch::ClusterBarrier::arrive(sm.q_empty + s);
        }
        ++q_uses;
    };

    sm90_bwd_consume<Traits, kGroupWalk>(params, w, sm, acc_dk, acc_dv, tdKc, tdVc, process_block, [](int) {}, on_head);
#endif // __CUDA_ARCH_FEAT_SM90_ALL
}

} // namespace flashattn::cuda::kernels
