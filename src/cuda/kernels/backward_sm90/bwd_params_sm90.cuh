// The Hopper backward's parameter block, and the TMA descriptors of Q and dO that it carries.
//
// Where Q and dO are dense (batch, seqlen_q, heads, head_dim) tensors whose strides and base are
// multiples of 16 bytes, one producer thread loads each query block's Q and dO with TMA
// (host/tensor_maps.h): boxes of one swizzle atom's columns (kQBoxCols, kDoBoxCols: 64 columns of
// 128-byte rows, or 32 of 64-byte rows) by kBlockM rows in the swizzle of SmemLayoutQ / SmemLayoutDo,
// rows past seqlen_q and columns past head_dim zero-filled by the hardware. Varlen and unaligned
// layouts keep the per-lane cp.async path.
//
// K and V of a key block likewise (kv_tma, below).
//
// The map of the fp32 dQ scratch (dq_map; host/tensor_maps.h) that the producer's bulk tensor
// reductions add the consumers' dQ through, from the consumers' staging in the Q / dO stage
// (Traits::kDqStaged) or, with the ordered dQ, from the hand-off buffer's boxes: boxes of 32 columns
// by kBlockM rows. (The default hand-off adds rows and reads no map.)
#pragma once

#include "host/tensor_maps.h"
#include "kernels/bwd_args.h"

namespace flashattn::cuda {

struct Sm90BwdParams {
    BwdArgs args;
    CUtensorMap q_map, do_map; // valid when q_tma
    CUtensorMap k_map, v_map;  // valid when kv_tma
    CUtensorMap dk_map, dv_map; // valid when dkv_tma
    CUtensorMap dq_map;        // valid when dq_tma
    bool q_tma, kv_tma, dkv_tma, dq_tma;
};

template <typename Traits>
Sm90BwdParams sm90_backward_params(const BwdArgs& args, bool bf16) {
    Sm90BwdParams p{};
    p.args = args;
    const FwdArgs& fa = args.fwd;
    // V, dO and dV are kHeadDimV wide (fa.head_dim_v where the instance has a value head dim of its own).
    const int v_cols = Traits::kHeadDimV == Traits::kHeadDim ? fa.head_dim : fa.head_dim_v;
    if (fa.cu_seqlens_q == nullptr) {
        p.q_tma = encode_rows_map(p.q_map, fa.q, bf16, fa.head_dim, fa.seqlen_q, fa.num_heads, fa.batch,
                                  Traits::kQBoxCols, Traits::kBlockM) &&
                  encode_rows_map(p.do_map, args.dout, bf16, v_cols, fa.seqlen_q, fa.num_heads, fa.batch,
                                  Traits::kDoBoxCols, Traits::kBlockM);
    }
    // K and V likewise, a box of kKBoxCols (kVBoxCols) columns by kBlockN rows per column block, where
    // every sequence is the dense tensor's whole length: with seqused_k the rows between it and
    // seqlen_k hold whatever the caller left there, which the cp.async path never reads (a NaN there
    // would reach dS through dP, though P is 0).
    if (fa.cu_seqlens_k == nullptr && fa.seqused_k == nullptr) {
        const int heads_k = args.num_heads_k;
        p.kv_tma = encode_rows_map(p.k_map, fa.k, bf16, fa.head_dim, fa.seqlen_k, heads_k, fa.batch,
                                   Traits::kKBoxCols, Traits::kBlockN) &&
                   encode_rows_map(p.v_map, fa.v, bf16, v_cols, fa.seqlen_k, heads_k, fa.batch,
                                   Traits::kVBoxCols, Traits::kBlockN);
        // dK and dV of a CTA's last key block, staged in K's and V's tiles, stored likewise where
        // they go to dk / dv (not to the fp32 scratch).
        p.dkv_tma = args.dk_accum == nullptr &&
                    encode_rows_map(p.dk_map, args.dk, bf16, fa.head_dim, fa.seqlen_k, heads_k, fa.batch,
                                    Traits::kKBoxCols, Traits::kBlockN) &&
                    encode_rows_map(p.dv_map, args.dv, bf16, v_cols, fa.seqlen_k, heads_k, fa.batch,
                                    Traits::kVBoxCols, Traits::kBlockN);
    }
    if (Traits::kDqStaged || (Traits::kDqHandoff && args.dq_semaphore != nullptr))
        p.dq_tma = encode_dq_accum_map(p.dq_map, args.dq_accum, Traits::kHeadDim, args.q_rows_total,
                                       fa.cu_seqlens_q == nullptr ? fa.seqlen_q : 0, fa.num_heads,
                                       args.num_chunks, args.dq_chunk_stride, Traits::kBlockM);
    return p;
}

} // namespace flashattn::cuda
