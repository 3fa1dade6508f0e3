// The Hopper forward's parameter block, and the TMA descriptors of K and V that it carries.
//
// Where K and V are dense (batch, seqlen_k, heads_k, head_dim) tensors whose strides and base are
// multiples of 16 bytes, one producer thread loads each K/V block with TMA (host/tensor_maps.h):
// a box of kSwizzleCols (V: kSwizzleColsV) columns by kBlockN rows per column block, with rows past
// seqlen_k and columns past head_dim (V: its own width) filled with zeros by the hardware, as the
// cp.async path fills them.
// Everything else (varlen, seqused_k, unaligned strides) keeps the per-lane cp.async path, which
// zero-fills at each sequence's own end.
//
// O likewise: where O is staged in a buffer of its own (Sm90FwdTraits::kOwnOBuffer) and out is a
// dense (batch, seqlen_q, heads, head_dim_v) tensor that TMA can address, one thread of each
// consumer stores the consumer's 64 rows with TMA (boxes of kSwizzleColsV columns by 64 rows; the
// hardware clips rows past seqlen_q and columns past head_dim_v), so the consumer goes on to its
// next tile while the rows are written; elsewhere the consumers' threads store them.
#pragma once

#include "host/tensor_maps.h"
#include "device/tile_order.cuh"
#include "kernels/fwd_args.h"

namespace flashattn::cuda {

struct Sm90FwdParams {
    FwdArgs args;
    CUtensorMap k_map, v_map; // valid when kv_tma
    CUtensorMap o_map;        // valid when o_tma
    CUtensorMap q_map;        // valid when q_tma
    bool kv_tma, o_tma, q_tma;
    TileDecoder tiles; // args' tile order, sequences and heads
};

// The parameter block of one launch: TMA for K and V where the layout allows it.
template <typename Traits>
Sm90FwdParams sm90_forward_params(const FwdArgs& args, bool bf16) {
    Sm90FwdParams p{};
    p.args = args;
    p.tiles = TileDecoder(args.num_m_blocks, args.batch * args.num_heads, args.section_heads, args.num_heads,
                          args.heads_per_kv_head);
    const bool dense = args.cu_seqlens_k == nullptr && args.seqused_k == nullptr && args.block_table == nullptr;
    if (dense) {
        const int heads_k = args.num_heads / args.heads_per_kv_head;
        const int head_dim_v = Traits::kHeadDimV == Traits::kHeadDim ? args.head_dim : args.head_dim_v;
        p.kv_tma = encode_rows_map(p.k_map, args.k, bf16, args.head_dim, args.seqlen_k, heads_k, args.batch,
                                   Traits::kSwizzleCols, Traits::kBlockN) &&
                   encode_rows_map(p.v_map, args.v, bf16, head_dim_v, args.seqlen_k, heads_k, args.batch,
                                   Traits::kSwizzleColsV, Traits::kBlockN);
    }
    // Q likewise from one thread (a box of kSwizzleCols columns by kBlockM rows per column block; a
    // tile that starts before row 0, end-aligned under a causal mask, or ends past seqlen_q gets
    // zeros there) where tiles are long: with K, V and Q each loaded by one thread the producer's
    // other threads leave the tile loop, where with Q by cp.async all 128 wait on every tile's Q
    // buffer. Below 8k keys Q by TMA lost 1-2% at d128 without a mask (H100); from 8k it gains
    // 0.7-0.9% at d128 (H100, 18 rows, docs/perf-log.md). Only where the next tile's
    // Q loads a tile ahead (two Q buffers) or a CTA computes one tile: with one buffer (d <= 64's
    // three consumers; 192 / 128, O staged in it) Q's load waits for the tile's end.
    constexpr int kQTmaMinKeys = 8192;
    constexpr bool kQAhead = Traits::kQBuffers == 2 || !Traits::kCanPersist;
    if (kQAhead && args.cu_seqlens_q == nullptr && args.seqlen_k >= kQTmaMinKeys)
        p.q_tma = encode_rows_map(p.q_map, args.q, bf16, args.head_dim, args.seqlen_q, args.num_heads,
                                  args.batch, Traits::kSwizzleCols, Traits::kBlockM);
    if constexpr (Traits::kOwnOBuffer) {
        const int head_dim_v = Traits::kHeadDimV == Traits::kHeadDim ? args.head_dim : args.head_dim_v;
        p.o_tma = args.cu_seqlens_q == nullptr &&
                  encode_rows_map(p.o_map, args.out, bf16, head_dim_v, args.seqlen_q, args.num_heads, args.batch,
                                  Traits::kSwizzleColsV, Traits::kEpilogueRows);
    }
    return p;
}

} // namespace flashattn::cuda
