// The FlashAttention-2 forward on Hopper's warpgroup MMA (sm_90a): one CTA (two warpgroups) per
// (128-row query block, sequence, head). The algorithm, the phases and every score policy are
// those of fwd_kernel.cuh; only the products change:
//
//   S = Q K^T     wgmma, both operands read by the tensor cores from swizzled shared memory
//   O += P V      wgmma, P from registers (S's accumulator in 16 bits), V^T from shared memory
//
// wgmma is asynchronous, so the P V product of one block and the next block's S = Q K^T are
// issued back to back and the softmax of S runs while P V is still on the tensor cores (the output
// rescale waits for it). K and V blocks stream through two-stage rings in shared memory (cp.async,
// issued a full block ahead of use). cp.async writes through the generic proxy and
// wgmma reads through the async proxy, so each wait for a load is followed by fence.proxy.async
// before the barrier that publishes the tile.
#pragma once

#include "fwd_args.h"
#include "kernels/fwd_traits_sm90.cuh"
#include "kernels/online_softmax.cuh"
#include "kernels/score_policies.cuh"
#include "kernels/tile_ops.cuh"
#include "kernels/tile_order.cuh"
#include "kernels/wgmma_ops.cuh"

#include <cutlass/arch/barrier.h>

namespace flashattn::cuda::kernels {

using namespace cute;

// All of this thread's cp.async copies have landed and are visible to every thread's wgmma.
__device__ __forceinline__ void publish_async_copies() {
    cp_async_wait<0>();
    cutlass::arch::fence_view_async_shared();
    __syncthreads();
}

template <typename Traits, bool kExtras>
__global__ void __launch_bounds__(Traits::kThreads, 1)
    fwd_kernel_sm90(const __grid_constant__ FwdArgs args) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Element = typename Traits::Element;
    constexpr int kBlockM = Traits::kBlockM;
    constexpr int kBlockN = Traits::kBlockN;
    constexpr int kHeadDim = Traits::kHeadDim;
    const int tid = threadIdx.x;

    // Work item: heaviest query blocks first (tile_order.cuh).
    const TileCoord tile = tile_of_block(blockIdx.x, args.num_m_blocks, args.batch * args.num_heads,
                                         args.section_heads);
    const int m_block = tile.m_block;
    const int bh = tile.bh;
    const int b = bh / args.num_heads;
    const int h = bh - b * args.num_heads;
    const int h_kv = h / args.heads_per_kv_head;

    const SequenceBounds seq = sequence_bounds(args, b);
    const int m0 = m_block * kBlockM;
    if (m0 >= seq.q_len) return;
    const KvBlockRange range = kv_block_range<kBlockM, kBlockN>(args.mask, seq, m0);

    const bool varlen = args.cu_seqlens_q != nullptr;
    // (Dense sequences start at row 0 of their batch entry: sequence_bounds.)
    auto rows_of = [&](const fa_tensor& t, int64_t row0, int head, int rows) {
        return head_rows<Element, kHeadDim>(t, varlen, b, row0, head, rows);
    };
    Tensor mQ = rows_of(args.q, seq.q_row0, h, seq.q_len);
    Tensor mK = rows_of(args.k, seq.k_row0, h_kv, seq.k_len);
    Tensor mV = rows_of(args.v, seq.k_row0, h_kv, seq.k_len);
    Tensor mO = rows_of(args.out, seq.q_row0, h, seq.q_len);
    Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));
    Tensor gO = local_tile(mO, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));
    Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0)); // (N, D, n_blocks)
    Tensor gV = local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));

    // Shared memory: Q, then kStages K blocks, then kStages V blocks. K/V block j lives in stage
    // j % kStages (a ring).
    extern __shared__ __align__(1024) char smem[]; // 1024: the 128-byte swizzle repeats every 8 rows
    constexpr int kStages = Traits::kStages;
    constexpr int kKvElems = cosize(typename Traits::SmemLayoutKV{});
    Element* smem_q = reinterpret_cast<Element*>(smem);
    Element* smem_k = smem_q + cosize(typename Traits::SmemLayoutQ{});
    Element* smem_v = smem_k + kStages * kKvElems;
    Tensor sQ = make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutQ{});

    typename Traits::GmemLoad gmem_load;
    auto load_thr = gmem_load.get_thread_slice(tid);
    Tensor tQg = load_thr.partition_S(gQ);
    Tensor tQs = load_thr.partition_D(sQ);
    Tensor tKg = load_thr.partition_S(gK);
    Tensor tVg = load_thr.partition_S(gV);
    Tensor tQc = load_thr.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    Tensor tKVc = load_thr.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    Tensor column_ok = make_tensor<bool>(make_shape(size<2>(tKVc)));
    CUTE_UNROLL
    for (int k = 0; k < size(column_ok); ++k) column_ok(k) = get<1>(tKVc(0, 0, k)) < args.head_dim;
    auto stage_of = [&](int j) { return j % kStages; }; // j >= 0
    auto k_stage = [&](int stage) {
        return make_tensor(make_smem_ptr(smem_k + stage * kKvElems), typename Traits::SmemLayoutKV{});
    };
    auto v_stage = [&](int stage) {
        return make_tensor(make_smem_ptr(smem_v + stage * kKvElems), typename Traits::SmemLayoutKV{});
    };
    auto vt_stage = [&](int stage) {
        return make_tensor(make_smem_ptr(smem_v + stage * kKvElems), typename Traits::SmemLayoutVt{});
    };
    // Loads of K/V block j (when it is one this CTA visits). Every call commits one cp.async group,
    // empty or not, so that the wait counts below are the same in every iteration.
    auto load_k = [&](int j) {
        if (j >= range.n_begin)
            load_tile(gmem_load, tKg(_, _, _, j), load_thr.partition_D(k_stage(stage_of(j))), tKVc, column_ok,
                      seq.k_len - j * kBlockN);
        cp_async_fence();
    };
    auto load_v = [&](int j) {
        if (j >= range.n_begin)
            load_tile(gmem_load, tVg(_, _, _, j), load_thr.partition_D(v_stage(stage_of(j))), tKVc, column_ok,
                      seq.k_len - j * kBlockN);
        cp_async_fence();
    };

    // Tensor-core partitions: descriptors of the shared-memory operands, the accumulators.
    typename Traits::TiledMmaS mma_s;
    typename Traits::TiledMmaO mma_o;
    auto mma_s_thr = mma_s.get_thread_slice(tid);
    auto mma_o_thr = mma_o.get_thread_slice(tid);
    Tensor tSrQ = mma_s_thr.partition_fragment_A(sQ);
    Tensor acc_o = partition_fragment_C(mma_o, Shape<Int<kBlockM>, Int<kHeadDim>>{});
    clear(acc_o);
    Tensor acc_s = partition_fragment_C(mma_s, Shape<Int<kBlockM>, Int<kBlockN>>{});
    // P of the block whose P V product is next, already in the A-operand layout.
    Tensor p_storage = make_tensor<Element>(acc_s.layout());
    Tensor tOrP = make_tensor(p_storage.data(), wgmma_accumulator_as_a_operand(acc_s.layout()));
    auto issue_s = [&](int j) {
        Tensor tSrK = mma_s_thr.partition_fragment_B(k_stage(stage_of(j)));
        wgmma_issue<true>(mma_s, tSrQ, tSrK, acc_s);
    };
    auto issue_pv = [&](int j) {
        Tensor tOrVt = mma_o_thr.partition_fragment_B(vt_stage(stage_of(j)));
        wgmma_issue<false>(mma_o, tOrP, tOrVt, acc_o);
    };

    Tensor tScS = mma_s_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
    Tensor s_coords = make_tensor(tScS.data(), wgmma_rows_cols(tScS.layout()));
    Tensor acc_o_rows = make_tensor(acc_o.data(), wgmma_rows_cols(acc_o.layout()));
    constexpr int kRows = decltype(size<0>(acc_o_rows))::value;
    OnlineSoftmax<kRows> softmax;

    float exp_scale = args.scale_log2;
    float alibi_slope = 0.0f;
    DropoutKey dropout_key{};
    if constexpr (kExtras) {
        if (args.transform_scores) exp_scale = 1.4426950408889634f; // scores already carry the scale
        if (args.alibi_slopes) alibi_slope = args.alibi_slopes[int64_t(b) * args.alibi_batch_stride + h];
        if (args.dropout) dropout_key = args.dropout_key();
    }

    // Softmax of block j's scores (in acc_s) into P; returns through `correction` how much the
    // running output must shrink, which the caller applies once the previous P V is done.
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

    // Pipeline over the K/V blocks e - 1 = range.n_end - 1 down to range.n_begin. Step j:
    //   issue S = Q K[j]^T and O += P[j+1] V[j+1]      (tensor cores, back to back)
    //   wait for S; softmax of S                        (while P V runs)
    //   wait for P V; rescale O; P[j] = S in 16 bits
    //   the stages of K[j] and V[j+1] are free: load K[j-2] and V[j-1] into them, a full step
    //   ahead of their use.
    // cp.async groups, in issue order: {Q, K[e-1]}, V[e-1], K[e-2], V[e-2], K[e-3] (once S[e-1] is
    // done with its stage), then per step K[j-2], V[j-1]. At the top of step j the groups newer
    // than the ones it needs (K[j], V[j+1]) are the two of step j+1: wait until at most 2 remain.
    const int e = range.n_end;
    if (e > range.n_begin) {
        load_tile(gmem_load, tQg, tQs, tQc, column_ok, seq.q_len - m0);
        load_k(e - 1); // commits Q with K[e-1]
        load_v(e - 1);
        load_k(e - 2);
        load_v(e - 2);
        cp_async_wait<3>(); // Q, K[e-1]
        cutlass::arch::fence_view_async_shared();
        __syncthreads();
        issue_s(e - 1);
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_s);
        float unused[kRows];
        softmax_block(e - 1, cute::true_type{}, unused); // O is still zero: nothing to rescale
        scores_to_p();
        __syncthreads(); // every warpgroup is done with K[e-1]'s stage
        load_k(e - 3);
    }

    auto step = [&](int j, auto masked_tag) __attribute__((always_inline)) {
        cp_async_wait<2>(); // K[j] and V[j+1] have landed (this thread's copies) ...
        cutlass::arch::fence_view_async_shared();
        __syncthreads(); // ... everyone's, visible to wgmma
        issue_s(j);
        issue_pv(j + 1);
        warpgroup_wait<1>(); // S (committed first) is done
        warpgroup_fence_operand(acc_s);
        float correction[kRows];
        softmax_block(j, masked_tag, correction);
        warpgroup_wait<0>(); // P V is done
        warpgroup_fence_operand(acc_o);
        OnlineSoftmax<kRows>::rescale(acc_o_rows, correction);
        scores_to_p();
        __syncthreads(); // every warpgroup is done with K[j] and V[j+1]
        load_k(j - 2);
        load_v(j - 1);
    };

    // Blocks e - 2 down: masked ones at the two ends of the range, unmasked in between (block
    // e - 1 went through the masked path in the prologue).
    for (int j = range.n_end - 2; j >= range.n_begin;) {
        for (; j >= range.n_begin && (j >= range.unmasked_end || j < range.unmasked_begin); --j)
            step(j, cute::true_type{});
        for (; j >= range.n_begin && j >= range.unmasked_begin && j < range.unmasked_end; --j)
            step(j, cute::false_type{});
    }
    if (e > range.n_begin) { // the last block's P V
        cp_async_wait<0>();
        cutlass::arch::fence_view_async_shared();
        __syncthreads();
        issue_pv(range.n_begin);
        warpgroup_wait<0>();
        warpgroup_fence_operand(acc_o);
    }

    // Epilogue: normalise, lse, O through shared memory (Q's buffer) to 16-byte global stores.
    float row_lse[kRows];
    softmax.finish(acc_o_rows, exp_scale, kExtras && args.dropout ? args.keep_rescale : 1.0f, row_lse);

    Tensor o = convert_fragment<Element>(acc_o);
    Tensor sO = make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutO{});
    auto copy_o = make_tiled_copy_C(typename Traits::SmemCopyO{}, mma_o);
    auto copy_o_thr = copy_o.get_thread_slice(tid);
    Tensor tOrO_view = copy_o_thr.retile_S(o);
    Tensor tOsO = copy_o_thr.partition_D(sO);
    cp_async_wait<0>();
    __syncthreads(); // every warp is done with sQ
    copy(copy_o, tOrO_view, tOsO);

    if (args.lse) {
        Tensor tOcO = mma_o_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
        Tensor o_coords = make_tensor(tOcO.data(), wgmma_rows_cols(tOcO.layout()));
        if (get<1>(o_coords(0, 0)) == 0) { // one lane of each quad writes its rows
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

    __syncthreads();
    store_tile<typename Traits::GmemStore>(tid, sO, gO, column_ok, seq.q_len - m0);
#endif // __CUDA_ARCH_FEAT_SM90_ALL
}

} // namespace flashattn::cuda::kernels
