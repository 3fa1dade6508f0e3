// What the backward's kernels need, by value (the main kernel's only parameter, __grid_constant__).
//
// Built on the host from a validated BwdProblem (backend.cu). The forward part (q, k, v, out, lse,
// sizes, varlen arrays, mask, score transform, dropout) is a FwdArgs, so the score policies of the
// forward (kernels/score_policies.cuh) serve the backward unchanged.
//
// fp32 scratch, all in one workspace (backend.cu's BwdPlan); "tile d" is the compiled head dim the
// kernel runs with (>= the real head dim), rows are global rows (varlen: the packed row; dense:
// b * seqlen_q + i, resp. b * seqlen_k + j):
//   dsum      [lse index]                                  rowsum(dO * O), indexed like softmax_lse
//   lse_log2  [lse index]                                  lse * log2(e), +inf for -inf (Hopper kernels)
//   dq_accum  [chunk][query head][q row][tile d]          sum of dS K over the chunk's key blocks
//   dq_semaphore [sequence][query head][query block]      int32, ordered dQ only (zeroed by dsum)
//   dk_accum  [query head][k row][tile d]                  per query head (per pair on the pairs' walk),
//   dv_accum  [query head][k row][tile d]                  only when the kernel cannot write dk/dv itself
//                                                          (GQA, odd layouts); with dkv_add per KV head,
//                                                          zeroed, added to
//   dsink_terms [query head][sequence][dsum row block]    deterministic dsink only
#pragma once

#include "kernels/fwd_args.h"

#include <flashattn/flashattn.h>

#include <cstdint>

namespace flashattn::cuda {

struct BwdArgs {
    FwdArgs fwd;            // the forward as it was run (its q/k/v may be staged copies)

    fa_tensor dout;         // dO as the kernel reads it (16-byte chunks; maybe a staged copy)
    fa_tensor dq, dk, dv;   // the caller's outputs; dk/dv are written by the main kernel only when
                            // dk_accum is null, else by the finishing kernel (any layout)
    int32_t num_heads_k;
    int32_t qk_head_dim;    // the real head dims, of q, k, dq, dk and of v, out, dout, dv (fwd.head_dim
    int32_t v_head_dim;     // is the kernels' width: the wider one, rounded up to 8, when staged)
    int32_t accum_cols;     // columns per row of the fp32 scratch: the tile head dim

    float* dsum;
    // The Hopper kernels' lse per query row, indexed like dsum, written by the dsum pass: lse * log2(e),
    // or +inf where the row saw no key (lse = -inf), so that P = exp2(S * scale_log2 - lse_log2) is 0
    // there. lse_log2_none holds one +inf, which a stage's rows past their sequence load. Converted
    // once per row here, not by every consumer thread for each of its query columns at every block
    // (five instructions each: 100 of the d128 block loop's 691). Null for the mma.sync kernel,
    // which converts the lse itself.
    float* lse_log2;
    float* lse_log2_none;
    float* dq_accum;
    int64_t dq_chunk_stride; // elements between the chunks' dQ buffers; 0: one buffer, atomics
    int32_t num_chunks;      // CTAs per (sequence, head) along the keys: CTA c visits key blocks
                             // c, c + num_chunks, ...; == key blocks unless deterministic
    int32_t num_n_blocks;    // key blocks of the longest sequence; set by the launcher
    // Deterministic mode's ordered dQ on the Hopper kernel (planner: BackwardPlan::ordered_dq; null:
    // not this call): one CTA per key block, one dQ buffer, and per (sequence, query head, query
    // block of dq_semaphore_rows rows) a counter of the additions made to that block's dQ.
    // The key blocks that meet a query block add to it in a fixed order (from the first up, or with
    // dq_keys_descending from the last down), each once the counter says that every earlier one
    // has; the grid runs them in that order (bwd_sm90_common.cuh, Sm90BwdWork).
    int* dq_semaphore;
    int32_t dq_semaphore_blocks; // query blocks per (sequence, head): ceil(seqlen_q / dq_semaphore_rows)
    int32_t dq_semaphore_rows;   // query rows of a counted block: the kernel's block height
                                 // (tiles::backward_sm90_block_m; the dsum kernel zeroes the counters)
    int32_t dq_section_pairs;    // grid order: sections of this many (sequence, head) pairs, the
                                 // pairs fastest within a section, the key blocks in the order above
    bool dq_keys_descending;
    // Grid order otherwise (the Hopper kernel, one CTA per key block): the last tail_pairs (sequence,
    // head) pairs run key-major, every such pair's first key block, then every one's second, ...,
    // after the other pairs' CTAs pair by pair. Under a causal mask a pair's first key blocks meet
    // the most query blocks, so the grid then ends on short CTAs (0: pair by pair throughout).
    int32_t tail_pairs;
    // The Hopper backward's grid over KV heads (GQA, planner: BackwardPlan::kv_major): CTA
    // (sequence, run of group_heads query heads, chunk) walks them in turn for each of its key
    // blocks, dK/dV staying in registers across them; group_heads divides the group (the whole
    // group: dK/dV written once; a part: added into dk_accum's rows of the KV head (dkv_add), or in
    // deterministic mode stored into rows of its own, as the per-query-head grid's).
    // 1: a CTA per (sequence, query head, chunk).
    int32_t group_heads;
    float* dk_accum;         // null: the main kernel writes dk/dv (scaled, converted) itself
    float* dv_accum;
    // dK / dV added into dk_accum / dv_accum rows of the KV head (zeroed before the main kernel) rather
    // than stored per query head for the finishing kernel to sum: the Hopper kernel with GQA outside
    // deterministic mode, where the scratch is then group times smaller and the adds of a KV head's
    // query heads, which run close together in the grid, meet in L2.
    bool dkv_add;
    int64_t q_rows_total;    // rows of the dQ scratch per head: varlen ? total_q : batch * seqlen_q
    int64_t k_rows_total;    // rows of the dK/dV scratch per head: varlen ? total_k : batch * seqlen_k

    // dsink (fp32, num_heads; null = not asked): -sum of exp(sink - lse_i) * dsum_i over the rows of
    // each head, added up by the dsum pass: atomically into dsink, or (deterministic) one term per
    // dsum CTA into dsink_terms [head][sequence][row block], then summed in that order.
    float* dsink;
    float* dsink_terms;

    float dq_scale;          // softmax scale (dS is in units of the scaled score)
    float dk_scale;          // softmax scale
    float dv_scale;          // 1 / (1 - dropout_p): the kernel accumulates (P * keep)^T dO
};

} // namespace flashattn::cuda
