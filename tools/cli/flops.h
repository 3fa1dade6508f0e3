// FLOP counts behind the TFLOP/s figures, and which formula produced them.
//
// Dense problems use FlashAttention-2's own convention so our numbers compare with published ones:
// forward 4*b*h*sq*sk*d (two matmuls, 2 FLOPs per multiply-add), halved when causal, backward 2.5x
// forward (five matmuls). Under a sliding window or varlen that convention would be far off, so there
// the allowed (i, j) pairs are counted exactly: 4*d*pairs forward, 10*d*pairs backward.
#pragma once

#include "options.h"

#include "core/problem.h"

#include <string>

namespace flashattn::cli {

struct FlopCount {
    double forward = 0, backward = 0;
    double pairs = 0; // allowed (i, j) pairs over all heads; 0 when the FA2 formula was used
    std::string forward_formula, backward_formula; // which rule, for the report
};

FlopCount count_flops(const Problem& problem, const ProblemSpec& spec);

inline double tflops_per_s(double flops, double ms) { return ms > 0 ? flops / (ms * 1e-3) / 1e12 : 0.0; }

} // namespace flashattn::cli
