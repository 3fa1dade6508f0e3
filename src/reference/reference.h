// The fp64 reference: naive attention (S, P, dS row by row in full, no online softmax), written
// for clarity first. It is the executable definition the backends are tested against, and what the
// CLI's --check uses. It runs blocks of query rows on every core; its results do not depend on the
// number of threads (reference.cpp says how).
//
// It reads q, k, v (and dout) through the Problem's strides, exactly as a backend does, and returns
// results in canonical contiguous layouts:
//   out, dq:      (q_rows, num_heads, head_dim)    q_rows = varlen ? total_q : batch * seqlen_q,
//                                                  row of (b, i) = varlen ? cu_seqlens_q[b] + i : b * seqlen_q + i
//                                                  (out: head_dim_v columns)
//   dk, dv:       (k_rows, num_heads_k, head_dim)  likewise with seqlen_k / cu_seqlens_k / total_k (dv: head_dim_v)
//   dsink:        (num_heads), with learnable_sink
//   lse:          the library's softmax_lse layout (Problem::lse_index)
//   probs:        (batch, num_heads, seqlen_q, seqlen_k), varlen: seqlen_q/k are the maxima (attn_probs semantics)
// Rows and columns outside a sequence's lengths are 0 (lse: -inf).
#pragma once

#include "core/problem.h"

#include <vector>

namespace flashattn::reference {

enum class Precision {
    fp64,           // every operation in double: the reference
    same_as_inputs, // naive attention in the inputs' dtype, rounding S, P and each product's result
                    // to it like a framework's unfused ops would: the yardstick of the tolerance rule
};

struct ForwardResult {
    std::vector<double> out, lse, probs;
};

struct Gradients {
    std::vector<double> dq, dk, dv;
    std::vector<double> dsink; // (num_heads), only with learnable_sink
    // (num_heads): sum over the rows of |p_sink(i) D_i|, the terms dsink adds up. Rows with opposite
    // signs cancel, so this, not |dsink|, is the scale of the rounding error a sum of them carries.
    std::vector<double> dsink_magnitude;
    // (num_heads): sqrt(sum over the rows of p_sink(i)^2 sum_c (dO_ic O_ic)^2). D_i = rowsum(dO O)
    // carries the rounding of O to the dtype, of either sign in each row, so a sum over many rows
    // carries about the dtype's unit roundoff times this. Only the fp64 pass computes it (0 elsewhere).
    std::vector<double> dsink_rounding;
};

// Which formulas a naive computation follows where FlashAttention's differ from a framework's
// (unfused ops): P normalised by its row sum, and the backward's D_i (the term dS = P (dP - D)
// subtracts) as rowsum(P dP); or FlashAttention's, P = exp(S - lse) from the lse as stored (fp32)
// and D_i = rowsum(dO O) from the output rounded to the dtype. Each keeps roundings the other does
// not: the lse's at the scores' magnitude, and O's where a framework's dS cancels exactly (a row
// that sees one key). The tolerance rule's yardstick is the larger of the two errors.
enum class Formula { framework, flash_attention };

// probs is filled only when want_probs is set (O(batch * heads * seqlen_q * seqlen_k) memory).
ForwardResult forward(const Problem& problem, Precision precision, bool want_probs = false,
                      Formula formula = Formula::framework);


// Recomputes the forward itself (it does not trust out/softmax_lse in the params).
Gradients backward(const BwdProblem& problem, Precision precision, Formula formula = Formula::framework);

// The tolerance rule's yardstick: naive attention in the inputs' dtype, per output the worse
// (further from `exact`, the fp64 result) of its two Formula forms. The forward's lse is the
// framework form's (both forms compute it alike); the gradients carry no magnitudes.
ForwardResult naive_yardstick(const Problem& problem, bool want_probs, const ForwardResult& exact);
Gradients naive_yardstick(const BwdProblem& problem, const Gradients& exact);

// 2^-p for the dtype's p significant bits: the largest relative rounding error of a value stored in it.
double unit_roundoff(fa_dtype dtype);

// fa_kvcache_forward's definition. First the append, written into the caches the problem points at
// (give it a copy of the caller's caches): new key i of sequence b, rotated in fp32 exactly as
// core/problem.h's rotate_features does and rounded to the dtype, and new value i go to cache row
// cache_seqlens[b] + i; every backend must leave the caches bit-identical to this. Then the
// attention of forward() over the caches, with q rotated the same way and rounded to the dtype.
// The append only reads k_new/v_new, so running this twice on one copy (fp64, then same_as_inputs)
// leaves the same caches.
ForwardResult kvcache_forward(const KvCacheProblem& problem, Precision precision);

// fa_combine's definition, in fp64: out in canonical (batch * seqlen_q, num_heads, head_dim) order,
// lse as (batch, num_heads, seqlen_q).
ForwardResult combine(const CombineProblem& problem);

} // namespace flashattn::reference
