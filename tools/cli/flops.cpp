#include "flops.h"

#include "workload.h"

namespace flashattn::cli {

FlopCount count_flops(const Problem& problem, const ProblemSpec& spec) {
    FlopCount count;
    // Q K^T and dS-sized products are head_dim deep, P V and dO V^T head_dim_v: FA2's formulas with
    // d their mean (exact when they are equal).
    const double d = (double(spec.head_dim) + double(value_head_dim(spec))) / 2;
    const bool windowed = spec.window_left >= 0 || spec.window_right >= 0;
    if (!spec.varlen && !windowed) {
        count.forward = 4.0 * spec.batch * spec.heads * double(spec.seqlen_q) * spec.seqlen_k * d;
        if (spec.causal) count.forward /= 2;
        count.backward = 2.5 * count.forward;
        count.forward_formula = spec.causal ? "FA2 formula 4*b*h*sq*sk*d/2 (causal)" : "FA2 formula 4*b*h*sq*sk*d";
        count.backward_formula = "FA2 formula 2.5 x forward";
        return count;
    }
    count.pairs = double(allowed_pairs(problem));
    count.forward = 4.0 * d * count.pairs;
    count.backward = 10.0 * d * count.pairs;
    count.forward_formula = "exact 4*d*pairs";
    count.backward_formula = "exact 10*d*pairs";
    return count;
}

} // namespace flashattn::cli
