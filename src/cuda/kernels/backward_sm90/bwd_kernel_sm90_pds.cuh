// The Hopper backward with P and dS through shared memory (sm_90a, wgmma, warp-specialised): at head
// dim 256 (the planner's choice there outside deterministic chunks) and at q/k 192 with v 128
// (Sm90BwdPdSTraits' kHeadDimV, tiles::backward_sm90_value_dim). FlashAttention-3's schedule for its
// largest head dims. Same work items, scratch, producer, policies and epilogue as bwd_kernel_sm90.cuh
// (bwd_sm90_common.cuh); the consumers' products differ (the shapes and why: Sm90BwdPdSTraits in
// bwd_traits_sm90.cuh). d = kHeadDim (Q, K, dQ, dK), d_v = kHeadDimV (V, dO, dV).
//
//   warpgroup 0 (producer)      as bwd_kernel_sm90.cuh's: K, V once per key block (kv_full /
//                               kv_empty), Q, lse, dsum per query block into a ring of two stages
//                               (q_full / q_empty), dO into the same stages or (staged dQ, d256)
//                               into one stage of its own (do_full / do_empty); with the dQ hand-off
//                               (kDqHandoff) it adds the consumers' dQ to the scratch (dq_full /
//                               dq_empty), with staged dQ it reduces the staged boxes (dq_staged)
//   warpgroups 1, 2 (consumer)  per query block, consumer c (n = kBlockN / 2 keys each):
//     S = Q K^T, dP = dO V^T         keys [n c, n (c + 1)), issued together; the softmax under dP
//     P = exp2(S * scale_log2 - lse_log2[query])          [transform] [mask]
//     [the readers of the P / dS buffer's block before are done: below]
//     P -> shared (16-bit); [softcap derivative]; dS = P (dP - dsum[query]) -> shared
//     named barrier: both consumers' P and dS of the block are in shared memory
//     dV^T += dO^T P, dK^T += Q^T dS its rows of d_v, d (split by head dim) or its keys (by keys)
//     dQ = dS K                      columns [c d/2, (c+1) d/2) of d (staged: two 64-column halves)
//     dQ to the hand-off buffer once it completes (dV and dK still run), or staged (below)
//   epilogue: bwd_sm90_store_dkdv (each consumer its part of dK^T, dV^T).
//
// Dropout is not compiled here (the planner runs the mma.sync kernel for it). Unlike the d128
// schedule, the registers here hold key pairs per query row, as apply_dropout's Philox words come,
// so it could be added as a policy.
//
// The dQ hand-off (bwd_kernel_sm90.cuh's: the consumers store a block's dQ in fp32 to shared memory,
// the producer adds each row with a bulk reduction) where the traits find room for its buffer beside
// two Q/dO stages: at 192 / 128. At d256 each consumer stages its dQ in shared memory that other
// parts of the block free (kDqStaged, the traits say where) and the producer adds it with bulk
// tensor reductions; the kernel body says when each part is free, and how deterministic mode orders
// the additions. With the hand-off, the ordered dQ and the chunks are the producer's
// (bwd_sm90_common.cuh), as in bwd_kernel_sm90.cuh.
//
// Memory model (as bwd_kernel_sm90.cuh): the producer writes shared memory only with cp.async,
// tracked by cp.async.mbarrier.arrive, and TMA, tracked by the stage's byte count; consumers run
// fence.proxy.async after waiting, before wgmma reads. P and dS are ordinary stores, so each writer
// fences (generic -> async proxy) before the named barrier that hands them to the other consumer's
// wgmmas. P and dS have one buffer each: with the hand-off a consumer writes block m's only after a
// barrier that the other passes only after its wgmmas of block m-1 completed; with staged dQ, P only
// after the producer's reductions have read block m-1's region and P box (extra_read; every dV of
// m-1, P's readers, completed before the p_read barrier that preceded that staging), and dS only
// after a barrier that the other consumer passes once all its wgmmas of m-1 completed. The dQ
// hand-off buffer is single, as in bwd_kernel_sm90.cuh: block u's dQ is written once the producer
// has read block u-1's (dq_empty). Staged dQ is written with ordinary stores, fenced to the async
// proxy before the arrival on dq_staged[s] after which the producer reduces from it; the Q stage is
// refilled only after the producer's own q_empty arrival, and the region and P written again only
// after its extra_read arrival, both once the reductions have read them.
// tests/gpu/bwd_sm90_protocol_check.py models both (run_pds with the hand-off, run_pds_do1).
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
    static_assert(Traits::kPdSSchedule && Traits::kPdSBuffers == 1);
    using Element = typename Traits::Element;
    constexpr int kBlockM = Traits::kBlockM;
    constexpr int kBlockN = Traits::kBlockN;
    constexpr int kHeadDim = Traits::kHeadDim;
    constexpr int kHeadDimV = Traits::kHeadDimV;
    constexpr int kQStages = Traits::kQStages;
    constexpr bool kStaged = Traits::kDqStaged;
    const FwdArgs& fa = args.fwd;

    const Sm90BwdWork w(args, cute::bool_constant<kOrderedDq>{});
    const SequenceBounds& seq = w.seq;
    if (w.chunk * kBlockN >= w.k_stored) return; // the whole CTA, before any barrier

    extern __shared__ __align__(1024) char smem[];
    const Sm90BwdSmem<Traits> sm(smem);
    Element* const smem_p = sm.scores;                          // P
    Element* const smem_ds = sm.scores + Traits::kSmemPdSElems; // dS
    // (queries, keys) and its (keys, queries) view of P or dS.
    auto pds_tensor = [&](Element* base) { return make_tensor(make_smem_ptr(base), typename Traits::SmemLayoutPdS{}); };
    auto pdst_tensor = [&](Element* base) { return make_tensor(make_smem_ptr(base), typename Traits::SmemLayoutPdSt{}); };

    if (sm90_bwd_ran_producer<Traits, kGroupWalk, kOrderedDq>(params, w, sm)) return;

    // ---------------- consumers ----------------
    const int tid = int(threadIdx.x) - Traits::kProducerThreads; // 0..255 over the two consumers
    constexpr uint32_t kPdSReadyBarrier = 0; // cutlass::arch::NamedBarrier adds its reserved offset
    // Both consumers' products of the block before that read P and dS (with the hand-off, before P)
    // or dS (staged dQ, before dS) completed.
    constexpr uint32_t kPdSFreeBarrier = 4; // (1: the epilogue, 2 and 3: staged dQ)
    // Staged dQ: every consumer's dV^T (P's readers) completed, before consumer 1 stages over P.
    constexpr uint32_t kPReadBarrier = 5;

    typename Traits::TiledMmaSdP mma_sdp;
    typename Traits::TiledMmaDk mma_dk;
    typename Traits::TiledMmaDv mma_dv;
    typename Traits::TiledMmaDq mma_dq;
    const int consumer = tid / 128;
    auto sdp_thr = mma_sdp.get_thread_slice(tid);
    auto dk_thr = mma_dk.get_thread_slice(tid);
    auto dv_thr = mma_dv.get_thread_slice(tid);
    // Staged: dQ's products are one warpgroup's each (its thread tid % 128; every thread of a
    // warpgroup has the same operand descriptors, taken at thread 0).
    auto dq_thr = mma_dq.get_thread_slice(kStaged ? tid % 128 : tid);
    auto sdp_ops = sm90_bwd_operand_slice<Traits>(mma_sdp); // (the operands' descriptors)
    auto dk_ops = sm90_bwd_operand_slice<Traits>(mma_dk);
    auto dv_ops = sm90_bwd_operand_slice<Traits>(mma_dv);
    auto dq_ops = [&] {
        if constexpr (kStaged) return mma_dq.get_thread_slice(0);
        else return sm90_bwd_operand_slice<Traits>(mma_dq);
    }();

    using DkShape = typename Traits::template DkvShape<kHeadDim>; // (d, keys)
    using DvShape = typename Traits::template DkvShape<kHeadDimV>;
    // One dQ product's tile: the consumers' whole dQ (AlongN), or (staged) one consumer's half.
    using DqShape = Shape<Int<kBlockM>, Int<kStaged ? Traits::kDqCols : kHeadDim>>;
    Tensor acc_dk = partition_fragment_C(mma_dk, DkShape{});
    Tensor acc_dv = partition_fragment_C(mma_dv, DvShape{});
    Tensor acc_s = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
    Tensor acc_dq = partition_fragment_C(mma_dq, DqShape{});

    // Queries are the rows of S and dP here: the policies see the accumulators as they are.
    Tensor tScS = sdp_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    Tensor coords_qk = make_tensor(tScS.data(), wgmma_rows_cols(tScS.layout()));
    Tensor scores_qk = make_tensor(acc_s.data(), wgmma_rows_cols(acc_s.layout()));
    Tensor grads_qk = make_tensor(acc_dp.data(), wgmma_rows_cols(acc_dp.layout()));
    constexpr int kRows = decltype(size<0>(coords_qk))::value; // query rows per thread (2)
    // P, dS registers -> shared: stmatrix, 16 bytes of neighbouring keys per thread and 8 x 8 tile.
    // Where a consumer's keys are whole 16-key atoms of the buffer (192 / 128), CuTe's tiled copy
    // (four tiles an instruction) into position-independent views of the buffers (as dS^T in
    // bwd_kernel_sm90.cuh); CuTe cannot cut the buffer's atoms at d256's 40, so there one x2
    // instruction per 8-key group (rows 16w .. 16w + 7 and + 8 .. + 15 of warp w), at the
    // buffer's byte offset of each lane's row (lanes 0-15 give the rows).
    auto store_pds = [&](Element* base, auto const& acc) {
        Tensor values = convert_fragment<Element>(acc);
        constexpr int kKeys = Traits::kKeysPerWarpGroup;
        if constexpr (kKeys % 16 == 0) {
            auto copy_pds = make_tiled_copy_C(Copy_Atom<SM90_U32x4_STSM_N, Element>{}, mma_sdp);
            auto copy_pds_thr = copy_pds.get_thread_slice(tid);
            copy(copy_pds, copy_pds_thr.retile_S(values),
                 copy_pds_thr.partition_D(as_position_independent_swizzle_tensor(pds_tensor(base))));
        } else {
            Tensor pairs = recast<uint32_t>(values); // pair h + 2 j: row + 8 h, keys 8 j + 2 t, + 1
            static_assert(size(decltype(pairs){}) == 2 * (kKeys / 8), "(2 rows, keys / 8 groups) per thread");
            const int lane = tid % 32;
            const int row = 16 * ((tid % 128) / 32) + lane % 8 + 8 * ((lane / 8) % 2);
            const uint32_t at = cast_smem_ptr_to_uint(base);
            CUTE_UNROLL
            for (int j = 0; j < kKeys / 8; ++j) {
                const uint32_t offset =
                    smem_byte_offset<Element, typename Traits::SmemLayoutPdS>(row, kKeys * consumer + 8 * j);
                asm volatile("stmatrix.sync.aligned.m8n8.x2.shared.b16 [%0], {%1, %2};\n" ::"r"(at + offset),
                             "r"(pairs(2 * j)), "r"(pairs(2 * j + 1))
                             : "memory");
            }
        }
    };
    // (row, col) of the dQ accumulator (staged: within the consumer's half), and (column, key) of
    // dK^T / dV^T's: registers 2t, 2t+1 are neighbouring columns, resp. keys (the epilogue knows).
    Tensor tdQc = dq_thr.partition_C(make_identity_tensor(DqShape{}));
    Tensor tdKc = dk_thr.partition_C(make_identity_tensor(DkShape{}));
    Tensor tdVc = dv_thr.partition_C(make_identity_tensor(DvShape{}));

    // The current query head's ALiBi slope and index.
    float alibi_slope = 0.0f;
    int dq_head = w.h_first;
    auto on_head = [&](int head) { // query head w.h_first + head (sm90_bwd_consume)
        if constexpr (kExtras) {
            if (fa.alibi_slopes) alibi_slope = fa.alibi_slopes[int64_t(w.b) * fa.alibi_batch_stride + w.h_first + head];
        }
        if constexpr (kStaged) dq_head = w.h_first + head;
    };

    // dQ staged (Traits::kDqStaged, d256). Consumer c computes its 64 x 128 fp32 of a block in two
    // 64-column products. The first, once it completes, goes to boxes 0 and 1 (Sm90BwdSmem::
    // staged_dq_box: the region, consumer 1's second over P), after a barrier behind every
    // consumer's dV^T (P's readers), and the consumer arrives on dq_region_staged; the second, once
    // the consumer's dK^T (the only reader of its column blocks of the Q stage after S) has
    // completed, to boxes 2 and 3 over those blocks, and it arrives on dq_staged[s] and q_empty. The
    // producer's dQ thread adds each half with bulk tensor reductions as soon as both consumers
    // staged it and, once they have read it, releases the region and P box (extra_read, which the
    // consumers wait for before the next block's P: the first half's early reduction leaves its
    // read a block's second half to finish) and the Q stage (its q_empty arrival), ordering the
    // additions where deterministic mode asks for it (bwd_sm90_common.cuh). Blocks of packed
    // (varlen) rows that end past their sequence (a box would reach into the next sequence's rows)
    // and launches without the map add their rows from the boxes here (add_staged_dq; one thread per
    // address, so deterministic chunks keep their order); with the ordered dQ each consumer's first
    // thread waits for the turn before and counts the consumer's adds after them (one arrival each;
    // two per key block, as the producer's).
    const bool dq_issuer = tid % 128 == 0;
    const uint32_t staged_barrier = 2 + consumer; // one per consumer (0: P/dS ready, 1: the epilogue)
    // The counter of query block m of the current query head (on the group walk, dq_head's).
    auto dq_counter = [&](int m) { return w.dq_counter(args, dq_head, m); };
    auto wait_turn = [&](int m) { // the issuer, before its consumer's adds to query block m
        const int turn = Traits::kConsumerWarpGroups * w.template dq_rank<kBlockM, kBlockN>(args, m);
        while (load_acquire_gpu(dq_counter(m)) < turn) {}
    };
    // acc_dq (product `half`) -> its two boxes of stage s. wgmma's accumulator layout: register v =
    // v0 + 2 h + 4 j holds row row0 + 8 h, column col0 + v0 + 8 j (col0 even, below 8), so a
    // thread's rows share row % 8 and its 16-byte chunk of a 32-column row is (col % 32) / 4 =
    // col0 / 4 + 2 (j % 4): the swizzled chunk (XOR row % 8) is 2 (j % 4) XOR a thread constant.
    auto store_staged_dq = [&](int s, int half) {
        int row0 = get<0>(tdQc(0)), col0 = get<1>(tdQc(0));
        asm volatile("" : "+r"(row0), "+r"(col0)); // computed here, not held across the main loop
        const int chunk_xor = (col0 / 4) ^ (row0 % 8);
        const uint32_t thread_offset = row0 * 128 + (col0 % 4) * 4;
        constexpr int kBoxesPerProduct = Traits::kDqCols / Traits::kDqBoxCols;
        static_assert(size(decltype(acc_dq){}) == 4 * (Traits::kDqCols / 8), "(2, 2, columns / 8) per thread");
        CUTE_UNROLL
        for (int j = 0; j < Traits::kDqCols / 8; ++j) {
            const uint32_t at = cast_smem_ptr_to_uint(sm.staged_dq_box(s, consumer, half * kBoxesPerProduct + j / 4)) +
                                thread_offset + uint32_t(((2 * (j % 4)) ^ chunk_xor) * 16);
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
        int ctid = tid;
        asm volatile("" : "+r"(ctid)); // its addresses computed here, not held across the main loop
        const int lane = ctid % 32, chunk = lane % 8, c = ctid / 128;
        const uint32_t box_at = cast_smem_ptr_to_uint(sm.staged_dq_box(s, c, lane / 8));
        const int rows_valid = min(seq.q_len - m0, kBlockM);
        float* const dq_block = w.template dq_rows_of_head<kHeadDim>(args, dq_head) + int64_t(m0) * kHeadDim +
                                c * Traits::kColsPerWarpGroup + 4 * lane;
        static_assert(!kStaged || (Traits::kColsPerWarpGroup == 4 * 32 && Traits::kDqBoxes == 4),
                      "a warp's 32 lanes cover a row of the consumer's columns, 8 of them a box");
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
        const int do_s = kStaged ? 0 : s; // dO's stage
        cutlass::arch::ClusterBarrier::wait(sm.q_full + s, (q_uses / kQStages) & 1);
        cutlass::arch::fence_view_async_shared();

        // K, V descriptors are rebuilt per block from a base the compiler cannot see through,
        // as in bwd_kernel_sm90.cuh (hoisted out of the loop, the loop-invariant ones stay live).
        Element* k_base = sm.k;
        Element* v_base = sm.v;
        asm volatile("" : "+l"(k_base), "+l"(v_base));
        Tensor tSrQ = sdp_ops.partition_fragment_A(sm.q_stage(sm.q, s));
        Tensor tSrK = sdp_ops.partition_fragment_B(make_tensor(make_smem_ptr(k_base), typename Traits::SmemLayoutK{}));
        Tensor tdPrdO = sdp_ops.partition_fragment_A(sm.do_stage(sm.d_o, do_s));
        Tensor tdPrV = sdp_ops.partition_fragment_B(make_tensor(make_smem_ptr(v_base), typename Traits::SmemLayoutV{}));
        // Zeroed by the wgmma's scale-d, not by clear() (bwd_kernel_sm90.cuh says why).
        wgmma_issue<true>(mma_sdp, tSrQ, tSrK, acc_s);
        if constexpr (kStaged) { // dO's own stage: loaded once both consumers' dV of the block before completed
            cutlass::arch::ClusterBarrier::wait(sm.do_full, q_uses & 1);
            cutlass::arch::fence_view_async_shared();
        }
        wgmma_issue<true>(mma_sdp, tdPrdO, tdPrV, acc_dp);

        float lse_log2[kRows];
        sm90_bwd_lse_log2(lse_log2, Sm90BwdStageLse<decltype(coords_qk)>{coords_qk, sm.lse + s * kBlockM});

        warpgroup_wait<1>(); // S (dP may still run)
        warpgroup_fence_operand(acc_s);
        recompute_probs<kMasked, kExtras>(scores_qk, coords_qk, fa, alibi_slope, seq, m0, n0, exp_scale, lse_log2,
                                          block_key_mask(fa.mask, seq, m0, n0));
        // P's readers of the block before are done (the memory model above): with staged dQ the
        // reductions' read of the region and the P box (every dV passed the block's p_read barrier
        // before), with the hand-off every product of both consumers.
        if constexpr (kStaged) {
            if (q_uses > 0) cutlass::arch::ClusterBarrier::wait(sm.extra_read, (q_uses - 1) & 1);
        } else {
            cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kPdSFreeBarrier);
        }
        store_pds(smem_p, acc_s);
        if constexpr (kExtras) {
            if (fa.softcap > 0.0f)
                apply_softcap_derivative(scores_qk, coords_qk, fa, alibi_slope, seq, m0, n0, lse_log2);
        }

        warpgroup_wait<0>(); // dP
        warpgroup_fence_operand(acc_dp);
        sm90_bwd_dscores(grads_qk, scores_qk, coords_qk, sm.dsum + s * kBlockM);
        // Staged: dS's readers of the block before (the other consumer's dK^T and second dQ) are done.
        if constexpr (kStaged) cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kPdSFreeBarrier);
        store_pds(smem_ds, acc_dp);
        cutlass::arch::fence_view_async_shared(); // P, dS (generic stores) -> the wgmmas below
        cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kPdSReadyBarrier);

        // dV^T += dO^T P, dK^T += Q^T dS: P, dS as (keys, queries) B.
        Tensor tdVrdOt = dv_ops.partition_fragment_A(sm.dot_stage(sm.d_o, do_s));
        Tensor tdVrP = dv_ops.partition_fragment_B(pdst_tensor(smem_p));
        Tensor tdKrQt = dk_ops.partition_fragment_A(sm.qt_stage(sm.q, s));
        Tensor tdKrdS = dk_ops.partition_fragment_B(pdst_tensor(smem_ds));
        Tensor tdQrdS = dq_ops.partition_fragment_A(pds_tensor(smem_ds));
        Tensor kt = make_tensor(make_smem_ptr(k_base), typename Traits::SmemLayoutKt{});
        if constexpr (kStaged) {
            // dV first: its completion frees dO for the next block's load. Then the first dQ half,
            // dK, and the second dQ half once the first has left the registers. The consumer's dQ
            // columns are K^T's column blocks 2c and 2c + 1 (of kDqCols).
            const int wg = cutlass::canonical_warp_group_idx() - 1; // the consumer, warp-uniform
            auto dq_half = [&](int half) {
                Tensor tdQrKt = dq_ops.partition_fragment_B(
                    local_tile(kt, Shape<Int<Traits::kDqCols>, Int<kBlockN>>{}, make_coord(2 * wg + half, _0{})));
                wgmma_issue<true>(mma_dq, tdQrdS, tdQrKt, acc_dq);
            };
            wgmma_issue<false>(mma_dv, tdVrdOt, tdVrP, acc_dv);
            dq_half(0);
            wgmma_issue<false>(mma_dk, tdKrQt, tdKrdS, acc_dk);
            warpgroup_wait<2>(); // dV: dO and P are read
            warpgroup_fence_operand(acc_dv);
            cutlass::arch::ClusterBarrier::arrive(sm.do_empty);
            warpgroup_wait<1>(); // the first dQ half
            warpgroup_fence_operand(acc_dq);
            cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kPReadBarrier); // every dV read P
            store_staged_dq(s, 0);
            cutlass::arch::fence_view_async_shared(); // (generic stores) -> the producer's bulk reductions
            cutlass::arch::ClusterBarrier::arrive(sm.dq_region_staged);
            dq_half(1);
            warpgroup_wait<0>(); // dK (the consumer's column blocks of the Q stage are read), dQ
            warpgroup_fence_operand(acc_dk);
            warpgroup_fence_operand(acc_dq);
            cutlass::arch::NamedBarrier::sync(128, staged_barrier); // every warp's dK read them
            store_staged_dq(s, 1);
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
        } else {
            // dQ first: its result leaves while dV and dK run.
            Tensor tdQrKt = dq_ops.partition_fragment_B(kt);
            wgmma_issue<true>(mma_dq, tdQrdS, tdQrKt, acc_dq);
            wgmma_issue<false>(mma_dv, tdVrdOt, tdVrP, acc_dv);
            wgmma_issue<false>(mma_dk, tdKrQt, tdKrdS, acc_dk);
            warpgroup_wait<2>(); // dQ (dV, dK may still run)
            warpgroup_fence_operand(acc_dq);
            sm90_bwd_hand_off_dq<Traits, kOrderedDq>(sm, acc_dq, tdQc, q_uses);
            warpgroup_wait<0>(); // dV, dK: the stage's Q and dO, the P / dS buffer are read
            warpgroup_fence_operand(acc_dv);
            warpgroup_fence_operand(acc_dk);
            cutlass::arch::ClusterBarrier::arrive(sm.q_empty + s);
        }
        ++q_uses;
    };

    sm90_bwd_consume<Traits, kGroupWalk>(params, w, sm, acc_dk, acc_dv, tdKc, tdVc, process_block, [](int) {}, on_head);
#endif // __CUDA_ARCH_FEAT_SM90_ALL
}

} // namespace flashattn::cuda::kernels
