// The FlashAttention-2 backward kernel: one CTA per (key block chunk, sequence, query head).
//
//   K, V block -> shared (once per key block); dK, dV accumulate in registers while, for every query
//   block that meets the key block (masked ones at the ends of the range, see q_block_range):
//     S  = Q K^T                       recomputed; [scale/softcap/ALiBi] [mask]
//     P  = exp2(S * scale_log2 - lse_log2)    from the forward's lse: no max, no sum
//     [dropout]                        dropped P negated (the sign carries the mask to dS)
//     dP = dO V^T
//     dS = P * (dP [* keep/(1-p)] - dsum) [* (1 - tanh^2)]
//     P, dS -> shared (16-bit)         the A operands below read them transposed
//     dV += P^T dO,  dK += dS^T Q
//     dQ  = dS K   -> fp32 scratch with red.add (each chunk has its own buffer when deterministic),
//                     in kDqSlabs column slabs so that its accumulator beside dK's and dV's stays small
//   dK *= scale, dV *= 1/(1-p); written as 16-bit (or fp32 per query head for GQA / odd layouts).
//
// Q and dO are double-buffered: the next query block is fetched (cp.async) while this one computes.
// In deterministic mode a CTA owns a chunk of key blocks (c, c + chunks, ...), so every dQ address
// of its buffer is updated by one thread only, in program order: the sum is bitwise reproducible.
//
// Index bookkeeping (tile coordinates; the identity tensors below give each register's (row, col)):
//   sQ, sdO   (kBlockM, kHeadDim)  x 2 buffers    query row i = m0 + row, head-dim column
//   sK, sV    (kBlockN, kHeadDim)                 key j = n0 + row
//   sP, sdS   (kBlockM, kBlockN)                  (query row, key)
//   acc_s, acc_dp  (kBlockM, kBlockN) on TiledMmaSdP      acc_dk, acc_dv (kBlockN, kHeadDim) on TiledMmaKV
//   acc_dq         (kBlockM, kHeadDim) on TiledMmaQ       dq scratch row = global q row, col < kHeadDim
#pragma once

#include "kernels/bwd_args.h"
#include "kernels/kernel_code.h"
#if FLASHATTN_KERNEL_CODE
#include "device/bwd_policies.cuh"
#endif
#include "kernels/backward/bwd_traits.cuh"
#if FLASHATTN_KERNEL_CODE
#include "device/fast_exp2.cuh"
#include "device/score_policies.cuh"
#include "device/tile_ops.cuh"
#endif

namespace flashattn::cuda::kernels {

using namespace cute;

#if FLASHATTN_KERNEL_CODE
// The same tensor over the buffer `offset` elements further on (the second Q / dO buffer). Offsets
// are whole tiles, multiples of the swizzle period, so the swizzle pattern is unchanged.
template <typename T>
__device__ __forceinline__ auto at_offset(T const& t, int offset) {
    return make_tensor(t.data() + offset, t.layout());
}
#endif

template <typename Traits, bool kExtras>
__global__ void __launch_bounds__(Traits::kThreads, 1) bwd_kernel(const __grid_constant__ BwdArgs args) {
#if FLASHATTN_KERNEL_CODE
    using Element = typename Traits::Element;
    constexpr int kBlockM = Traits::kBlockM;
    constexpr int kBlockN = Traits::kBlockN;
    constexpr int kHeadDim = Traits::kHeadDim;
    constexpr float kLog2e = 1.4426950408889634f;
    const FwdArgs& fa = args.fwd;
    const int tid = threadIdx.x;

    // Work item: chunk of key blocks, sequence, query head.
    const int chunk = int(blockIdx.x % unsigned(args.num_chunks));
    const int bh = int(blockIdx.x / unsigned(args.num_chunks));
    const int b = bh / fa.num_heads;
    const int h = bh - b * fa.num_heads;
    const int h_kv = h / fa.heads_per_kv_head;

    const SequenceBounds seq = sequence_bounds(fa, b);
    const int k_stored = stored_k_rows(fa, b); // dk/dv rows to write: k_len, then zeros (seqused_k)
    if (chunk * kBlockN >= k_stored) return;
    const bool varlen = fa.cu_seqlens_q != nullptr;

    // Global tensors of this (sequence, head), 64-bit offsets; columns >= fa.head_dim never touched.
    // (Dense sequences start at row 0 of their batch entry: sequence_bounds.)
    auto rows_of = [&](const fa_tensor& t, int64_t row0, int head, int rows) {
        return head_rows<Element, kHeadDim>(t, varlen, b, row0, head, rows);
    };
    Tensor gQ = local_tile(rows_of(fa.q, seq.q_row0, h, seq.q_len), Shape<Int<kBlockM>, Int<kHeadDim>>{},
                           make_coord(_, 0)); // (M, D, m_blocks)
    Tensor gdO = local_tile(rows_of(args.dout, seq.q_row0, h, seq.q_len), Shape<Int<kBlockM>, Int<kHeadDim>>{},
                            make_coord(_, 0));
    Tensor gK = local_tile(rows_of(fa.k, seq.k_row0, h_kv, seq.k_len), Shape<Int<kBlockN>, Int<kHeadDim>>{},
                           make_coord(_, 0)); // (N, D, n_blocks)
    Tensor gV = local_tile(rows_of(fa.v, seq.k_row0, h_kv, seq.k_len), Shape<Int<kBlockN>, Int<kHeadDim>>{},
                           make_coord(_, 0));
    // Written only when dk_accum is null, which the host allows only without GQA (h_kv == h).
    Tensor gdK = local_tile(rows_of(args.dk, seq.k_row0, h_kv, k_stored), Shape<Int<kBlockN>, Int<kHeadDim>>{},
                            make_coord(_, 0));
    Tensor gdV = local_tile(rows_of(args.dv, seq.k_row0, h_kv, k_stored), Shape<Int<kBlockN>, Int<kHeadDim>>{},
                            make_coord(_, 0));

    // fp32 scratch rows of this (sequence, head): row r of the dQ / dK / dV tile at + r * kHeadDim.
    const int64_t q_global_row0 = varlen ? seq.q_row0 : int64_t(b) * fa.seqlen_q;
    const int64_t k_global_row0 = varlen ? seq.k_row0 : int64_t(b) * fa.seqlen_k;
    float* const dq_rows = args.dq_accum + chunk * args.dq_chunk_stride +
                           (int64_t(h) * args.q_rows_total + q_global_row0) * kHeadDim;

    // Shared memory: Q[2], dO[2], K, V, P, dS.
    extern __shared__ __align__(128) char smem[];
    Element* const smem_q = reinterpret_cast<Element*>(smem);
    Element* const smem_do = smem_q + 2 * Traits::kSmemQElems;
    Element* const smem_k = smem_do + 2 * Traits::kSmemQElems;
    Element* const smem_v = smem_k + Traits::kSmemKVElems;
    Element* const smem_p = smem_v + Traits::kSmemKVElems;
    Element* const smem_ds = smem_p + Traits::kSmemPElems;
    Tensor sQ = make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutQ{});
    Tensor sdO = make_tensor(make_smem_ptr(smem_do), typename Traits::SmemLayoutQ{});
    Tensor sQt = make_tensor(make_smem_ptr(smem_q), typename Traits::SmemLayoutQt{});
    Tensor sdOt = make_tensor(make_smem_ptr(smem_do), typename Traits::SmemLayoutQt{});
    Tensor sK = make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutKV{});
    Tensor sKt = make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutKt{});
    Tensor sV = make_tensor(make_smem_ptr(smem_v), typename Traits::SmemLayoutKV{});
    Tensor sP = make_tensor(make_smem_ptr(smem_p), typename Traits::SmemLayoutPdS{});
    Tensor sPt = make_tensor(make_smem_ptr(smem_p), typename Traits::SmemLayoutPdSt{});
    Tensor sdS = make_tensor(make_smem_ptr(smem_ds), typename Traits::SmemLayoutPdS{});
    Tensor sdSt = make_tensor(make_smem_ptr(smem_ds), typename Traits::SmemLayoutPdSt{});
    constexpr int kQBuffer = Traits::kSmemQElems; // offset of the second Q / dO buffer

    // Global -> shared: this thread's chunks of Q, dO, K and V (TileLoads, tile_ops.cuh).
    const TileLoads<typename Traits::GmemLoad, kBlockM, kBlockN, kHeadDim> loads(tid);
    auto tQ = loads.partition(gQ, sQ);
    auto tdO = loads.partition(gdO, sdO);
    auto tK = loads.partition(gK, sK);
    auto tV = loads.partition(gV, sV);
    Tensor column_ok = loads.column_ok(fa.head_dim);

    // The products, their operands read from shared memory by ldmatrix (SmemGemm, tile_ops.cuh).
    using Copy = typename Traits::SmemCopy;   // ldmatrix
    using CopyT = typename Traits::SmemCopyT; // ldmatrix, transposing
    // S and dP: (query rows x keys).
    using MmaSdP = typename Traits::TiledMmaSdP;
    MmaSdP mma_sdp;
    auto sdp_thr = mma_sdp.get_thread_slice(tid);
    const auto gemm_s = smem_gemm<MmaSdP, Copy, Copy>(tid, sQ, sK);
    const auto gemm_dp = smem_gemm<MmaSdP, Copy, Copy>(tid, sdO, sV);
    // P, dS registers -> shared.
    auto copy_pds = make_tiled_copy_C(typename Traits::SmemCopyC{}, mma_sdp);
    auto copy_pds_thr = copy_pds.get_thread_slice(tid);
    Tensor tPsP = copy_pds_thr.partition_D(sP);
    Tensor tPsdS = copy_pds_thr.partition_D(sdS);

    // dV and dK: (keys x head dim), both operands transposed views.
    using MmaKV = typename Traits::TiledMmaKV;
    MmaKV mma_kv;
    auto kv_thr = mma_kv.get_thread_slice(tid);
    const auto gemm_dv = smem_gemm<MmaKV, CopyT, CopyT>(tid, sPt, sdOt);
    const auto gemm_dk = smem_gemm<MmaKV, CopyT, CopyT>(tid, sdSt, sQt);
    Tensor acc_dk = partition_fragment_C(mma_kv, Shape<Int<kBlockN>, Int<kHeadDim>>{});
    Tensor acc_dv = partition_fragment_C(mma_kv, Shape<Int<kBlockN>, Int<kHeadDim>>{});

    // dQ: (query rows x one slab of head-dim columns); K read transposed, slab by slab.
    constexpr int kDqCols = Traits::kDqCols;
    Tensor sKtSlab = make_tensor(make_smem_ptr(smem_k), typename Traits::SmemLayoutKtSlab{});
    using MmaQ = typename Traits::TiledMmaQ;
    MmaQ mma_q;
    auto q_thr = mma_q.get_thread_slice(tid);
    const auto gemm_dq = smem_gemm<MmaQ, Copy, CopyT>(tid, sdS, sKtSlab); // slab s: b shifted by s * kKtSlabElems

    // (row, col) of every accumulator register. Accumulators hold neighbouring column pairs: element
    // 2t and 2t+1 are (row, col) and (row, col + 1), col even (the m16n8 C layout; checked below).
    Tensor s_coords = accumulator_coords<kBlockM, kBlockN>(sdp_thr);
    Tensor tdQc = q_thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kDqCols>>{}));
    Tensor tdKVc = kv_thr.partition_C(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    static_assert(decltype(size<0, 0>(tdQc))::value == 2 && decltype(size<0, 0>(tdKVc))::value == 2,
                  "accumulator registers come in neighbouring column pairs");
    constexpr int kRows = decltype(size<0>(s_coords))::value; // query rows per thread in S

    float alibi_slope = 0.0f;
    DropoutKey dropout_key{};
    if constexpr (kExtras) {
        if (fa.alibi_slopes) alibi_slope = fa.alibi_slopes[int64_t(b) * fa.alibi_batch_stride + h];
        if (fa.dropout) dropout_key = fa.dropout_key();
    }
    const float exp_scale = kExtras && fa.transform_scores ? kLog2e : fa.scale_log2;

    for (int n = chunk; n * kBlockN < k_stored; n += args.num_chunks) {
        const int n0 = n * kBlockN;
        const QBlockRange range = q_block_range<kBlockM, kBlockN>(fa.mask, seq, n0);
        clear(acc_dk);
        clear(acc_dv);
        __syncthreads(); // the previous key block's epilogue is done with shared memory

        // One query block; masked_tag is a compile-time bool (see the forward: a run-time flag was
        // if-converted into mask instructions every block paid for). always_inline: two call sites.
        auto process_block = [&](int m, auto masked_tag) __attribute__((always_inline)) {
            constexpr bool kMasked = decltype(masked_tag)::value;
            const int m0 = m * kBlockM;
            const int buffer = ((m - range.m_begin) & 1) * kQBuffer;

            // lse (natural log, -inf for a row that saw no key) -> log2 units, +inf so that P = 0;
            // rows past the sequence likewise.
            float lse_log2[kRows], dsum[kRows];
            CUTE_UNROLL
            for (int r = 0; r < kRows; ++r) {
                const int i = m0 + get<0>(s_coords(r, 0));
                lse_log2[r] = INFINITY;
                dsum[r] = 0.0f;
                if (i < seq.q_len) {
                    const int64_t index = varlen ? int64_t(h) * fa.total_q + seq.q_row0 + i
                                                 : (int64_t(b) * fa.num_heads + h) * fa.seqlen_q + i;
                    const float lse = fa.lse[index];
                    lse_log2[r] = lse == -INFINITY ? INFINITY : lse * kLog2e;
                    dsum[r] = args.dsum[index];
                }
            }

            cp_async_wait<0>(); // Q[m], dO[m] (and K, V) have landed ...
            __syncthreads();    // ... for every thread, and everyone is done with the other buffer, sP, sdS
            if (m + 1 < range.m_end) {
                const int next = kQBuffer - buffer;
                const int rows_next = seq.q_len - m0 - kBlockM;
                loads.query_tile(tQ.g(_, _, _, m + 1), at_offset(tQ.s, next), column_ok, rows_next);
                loads.query_tile(tdO.g(_, _, _, m + 1), at_offset(tdO.s, next), column_ok, rows_next);
                cp_async_fence();
            }

            // P from S = Q K^T and the saved lse.
            Tensor acc_s = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
            clear(acc_s);
            gemm_s(acc_s, at_offset(gemm_s.a, buffer), gemm_s.b);
            Tensor probs = make_tensor(acc_s.data(), rows_cols(acc_s.layout()));
            recompute_probs<kMasked, kExtras>(probs, s_coords, fa, alibi_slope, seq, m0, n0, exp_scale, lse_log2,
                                              block_key_mask(fa.mask, seq, m0, n0));
            if constexpr (kExtras) {
                if (fa.dropout) negate_dropped(probs, s_coords, fa, dropout_key, b, h, m0, n0);
            }
            // P (times keep; 1/(1-p) comes in the epilogue) leaves for shared memory now, so that
            // only what dS needs stays in registers: P, with the softcap derivative folded in.
            {
                Tensor p16 = convert_fragment<Element>(acc_s);
                if constexpr (kExtras) {
                    if (fa.dropout) {
                        CUTE_UNROLL
                        for (int t = 0; t < size(p16); ++t) p16(t) = Element(fmaxf(acc_s(t), 0.0f));
                    }
                }
                copy(copy_pds, copy_pds_thr.retile_S(p16), tPsP);
            }
            if constexpr (kExtras) {
                if (fa.softcap > 0.0f) apply_softcap_derivative(probs, s_coords, fa, alibi_slope, seq, m0, n0, lse_log2);
            }

            // dS from dP = dO V^T.
            Tensor acc_dp = partition_fragment_C(mma_sdp, Shape<Int<kBlockM>, Int<kBlockN>>{});
            clear(acc_dp);
            gemm_dp(acc_dp, at_offset(gemm_dp.a, buffer), gemm_dp.b);
            Tensor grads = make_tensor(acc_dp.data(), rows_cols(acc_dp.layout()));
            CUTE_UNROLL
            for (int r = 0; r < kRows; ++r) {
                CUTE_UNROLL
                for (int c = 0; c < size<1>(grads); ++c) {
                    const float p = probs(r, c);
                    float ds = p * (grads(r, c) - dsum[r]);
                    if constexpr (kExtras) {
                        // Kept: P * (dP / (1-p) - dsum); dropped (p = -P): -P * dsum.
                        if (fa.dropout) ds = p >= 0.0f ? p * fmaf(grads(r, c), fa.keep_rescale, -dsum[r]) : p * dsum[r];
                    }
                    grads(r, c) = ds;
                }
            }
            Tensor ds16 = convert_fragment<Element>(acc_dp);
            copy(copy_pds, copy_pds_thr.retile_S(ds16), tPsdS);
            __syncthreads(); // P, dS complete in shared memory

            gemm_dv(acc_dv, gemm_dv.a, at_offset(gemm_dv.b, buffer));
            gemm_dk(acc_dk, gemm_dk.a, at_offset(gemm_dk.b, buffer));

            float* const dq_block = dq_rows + int64_t(m0) * kHeadDim;
            const int rows_valid = seq.q_len - m0;
            CUTE_UNROLL
            for (int slab = 0; slab < Traits::kDqSlabs; ++slab) {
                Tensor acc_dq = partition_fragment_C(mma_q, Shape<Int<kBlockM>, Int<kDqCols>>{});
                clear(acc_dq);
                gemm_dq(acc_dq, gemm_dq.a, at_offset(gemm_dq.b, slab * Traits::kKtSlabElems));
                float* const dq_slab = dq_block + slab * kDqCols;
                CUTE_UNROLL
                for (int t = 0; t < size(acc_dq); t += 2) {
                    const int row = get<0>(tdQc(t)), col = get<1>(tdQc(t));
                    if (row < rows_valid) red_add_pair(dq_slab + row * kHeadDim + col, acc_dq(t), acc_dq(t + 1));
                }
            }
        };

        if (range.m_end > range.m_begin) {
            loads.key_tile(tK.g(_, _, _, n), tK.s, column_ok, seq.k_len - n0);
            loads.key_tile(tV.g(_, _, _, n), tV.s, column_ok, seq.k_len - n0);
            const int rows_first = seq.q_len - range.m_begin * kBlockM;
            loads.query_tile(tQ.g(_, _, _, range.m_begin), tQ.s, column_ok, rows_first);
            loads.query_tile(tdO.g(_, _, _, range.m_begin), tdO.s, column_ok, rows_first);
            cp_async_fence();
        }
        // Masked blocks sit at the two ends of the range: masked, unmasked, masked (local windows).
        for (int m = range.m_begin; m < range.m_end;) {
            for (; m < range.m_end && (m < range.unmasked_begin || m >= range.unmasked_end); ++m)
                process_block(m, cute::true_type{});
            for (; m < range.m_end && m >= range.unmasked_begin && m < range.unmasked_end; ++m)
                process_block(m, cute::false_type{});
        }

        // Epilogue: dK = scale * dS^T Q, dV = (P keep)^T dO / (1-p). Rows past k_len hold zeros
        // (their keys were masked), which is what keys beyond seqused_k must receive.
        CUTE_UNROLL
        for (int t = 0; t < size(acc_dk); ++t) {
            acc_dk(t) *= args.dk_scale;
            acc_dv(t) *= args.dv_scale;
        }
        const int rows_valid = k_stored - n0;
        if (args.dk_accum) {
            // fp32 per query head; the finishing kernel sums each KV head's query heads in order.
            store_dkv_scratch<kHeadDim>(args, h, k_global_row0 + n0, acc_dk, acc_dv, tdKVc, rows_valid);
        } else {
            // 16-bit through shared memory (K's and V's buffers) to 16-byte global stores.
            Tensor dk16 = convert_fragment<Element>(acc_dk);
            Tensor dv16 = convert_fragment<Element>(acc_dv);
            auto copy_kv_c = make_tiled_copy_C(typename Traits::SmemCopyC{}, mma_kv);
            auto copy_kv_c_thr = copy_kv_c.get_thread_slice(tid);
            cp_async_wait<0>();
            __syncthreads(); // every warp is done reading sK (dQ) and sV (dP)
            copy(copy_kv_c, copy_kv_c_thr.retile_S(dk16), copy_kv_c_thr.partition_D(sK));
            copy(copy_kv_c, copy_kv_c_thr.retile_S(dv16), copy_kv_c_thr.partition_D(sV));
            __syncthreads();
            typename Traits::GmemStore gmem_store;
            auto store_thr = gmem_store.get_thread_slice(tid);
            Tensor tdKs = store_thr.partition_S(sK);
            Tensor tdVs = store_thr.partition_S(sV);
            Tensor tdKg = store_thr.partition_D(gdK(_, _, n));
            Tensor tdVg = store_thr.partition_D(gdV(_, _, n));
            Tensor tdKVc_store = store_thr.partition_D(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
            Tensor dk_regs = make_tensor<Element>(shape(tdKs));
            Tensor dv_regs = make_tensor<Element>(shape(tdVs));
            copy(gmem_store, tdKs, dk_regs);
            copy(gmem_store, tdVs, dv_regs);
            CUTE_UNROLL
            for (int m = 0; m < size<1>(dk_regs); ++m) {
                if (get<0>(tdKVc_store(0, m, 0)) >= rows_valid) continue;
                CUTE_UNROLL
                for (int k = 0; k < size<2>(dk_regs); ++k) {
                    if (column_ok(k)) {
                        copy(gmem_store, dk_regs(_, m, k), tdKg(_, m, k));
                        copy(gmem_store, dv_regs(_, m, k), tdVg(_, m, k));
                    }
                }
            }
        }
    }
#endif
}

} // namespace flashattn::cuda::kernels
