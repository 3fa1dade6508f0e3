// The check against the fp64 reference, with flash_attn's tolerance rule: our error may be at most
// a small multiple of the error that naive attention computed in the inputs' own precision makes
// (2x for out and lse, 3x for dq, dk, dv; plus a small absolute floor). The naive error measures how
// hard the problem is at this precision, so one rule fits fp16, bf16, fp32, every size and variant.
#pragma once

#include "progress.h"
#include "workload.h"

#include <functional>
#include <string>
#include <vector>

namespace flashattn::cli {

struct TensorCheck {
    std::string name;   // out, lse, dq, dk, dv
    double error;       // max |ours - fp64 reference|
    double naive_error; // max |naive same-precision - fp64 reference|
    double bound;       // factor * naive_error + floor
    bool pass;
};

struct CheckResult {
    std::vector<TensorCheck> tensors;
    bool pass = true;
    double seconds = 0; // time the reference took
};

// ours(i) for i < count against the fp64 reference and the naive same-precision result: bound =
// factor x naive error + a small floor.
TensorCheck compare_values(const char* name, double factor, size_t count, const std::function<double(size_t)>& ours,
                           const std::vector<double>& naive, const std::vector<double>& reference);

// Whether the naive reference (O(pairs x head_dim) work) finishes in reasonable time for this problem:
// --check runs by default only then.
bool reference_is_affordable(const Problem& problem, bool backward);

// Throws flashattn::Error (or std::exception) if the reference itself fails.
CheckResult check_against_reference(Workload& work, Outputs& outputs, bool backward, Progress& progress,
                                    const std::string& label = "");

} // namespace flashattn::cli
