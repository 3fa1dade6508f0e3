#include "checker.h"

#include "reference/reference.h"

#include <chrono>
#include <cmath>
#include <functional>
#include <stdexcept>

namespace flashattn::cli {
namespace {

constexpr double kForwardFactor = 2.0;  // out, lse
constexpr double kBackwardFactor = 3.0; // dq, dk, dv
// Keeps the bound above zero where the naive computation happens to be exact (e.g. fp32 on tiny
// problems, or all-masked rows where both are exactly 0).
constexpr double kAbsoluteFloor = 1e-5;

// Allowed pairs x head_dim (x4 with the backward) that the naive fp64 and same-precision passes get
// through in about ten seconds on one core (scripts/run.sh's problem, 8.6e9, took 7 s on one core of
// the 2-core development machine), less on several.
constexpr double kAffordableReferenceWork = 1e10;

// Equal values (including matching infinities, as lse has for empty rows) differ by 0; a NaN or an
// infinity on one side only is an infinite error.
// Per unit of magnitude of a sum of rounded terms (dsink): the dtype's relative rounding, scaled
// down for the averaging of independent roundings.
double sum_floor(fa_dtype dtype) { return dtype == FA_FLOAT32 ? 2e-6 : dtype == FA_FLOAT16 ? 1e-5 : 5e-5; }

double difference(double ours, double reference) {
    if (ours == reference) return 0.0;
    const double diff = std::fabs(ours - reference);
    return std::isnan(diff) ? INFINITY : diff;
}

template <typename Ours>
double max_error(const char* name, size_t count, const Ours& ours, const std::vector<double>& reference) {
    if (reference.size() != count)
        throw std::logic_error(std::string("reference returned ") + std::to_string(reference.size()) + " values of " +
                               name + ", expected " + std::to_string(count));
    double worst = 0.0;
    for (size_t i = 0; i < count; ++i) worst = std::fmax(worst, difference(ours(i), reference[i]));
    return worst;
}


TensorCheck compare(const char* name, double factor, const HostTensor& ours, const std::vector<double>& naive,
                    const std::vector<double>& reference) {
    return compare_values(name, factor, size_t(ours.elements()), [&](size_t i) { return double(ours.value(int64_t(i))); },
                   naive, reference);
}

} // namespace

TensorCheck compare_values(const char* name, double factor, size_t count, const std::function<double(size_t)>& ours,
                    const std::vector<double>& naive, const std::vector<double>& reference) {
    TensorCheck check;
    check.name = name;
    check.error = max_error(name, count, ours, reference);
    check.naive_error = max_error(name, count, [&](size_t i) { return naive[i]; }, reference);
    check.bound = factor * check.naive_error + kAbsoluteFloor;
    check.pass = check.error <= check.bound;
    return check;
}

bool reference_is_affordable(const Problem& problem, bool backward) {
    const double work = double(allowed_pairs(problem)) * double(problem.head_dim() + problem.head_dim_v()) / 2 *
                        (backward ? 4.0 : 1.0);
    return work <= kAffordableReferenceWork;
}

CheckResult check_against_reference(Workload& work, Outputs& outputs, bool backward, Progress& progress,
                                    const std::string& label) {
    using reference::Precision;
    const auto started = std::chrono::steady_clock::now();
    const Bindings host = host_bindings(work, outputs);
    const bool varlen = work.spec.varlen;
    const int steps = backward ? 4 : 2;
    const std::string naive_name = std::string("naive ") + dtype_flag_name(work.spec.dtype);
    CheckResult result;

    const fa_fwd_params fwd_params = forward_params(work, host, FA_BACKEND_CPU);
    const Problem problem = make_problem(&fwd_params, varlen);
    progress.begin(label + "reference 1/" + std::to_string(steps) + ": fp64 forward");
    const reference::ForwardResult exact = reference::forward(problem, Precision::fp64);
    // The naive yardstick, in both of reference::Formula's forms.
    progress.begin(label + "reference 2/" + std::to_string(steps) + ": " + naive_name + " forward, both forms");
    const reference::ForwardResult naive = reference::naive_yardstick(problem, false, exact);
    progress.end();
    result.tensors.push_back(compare("out", kForwardFactor, outputs.out, naive.out, exact.out));
    result.tensors.push_back(compare_values("lse", kForwardFactor, outputs.lse.size(),
                                     [&](size_t i) { return double(outputs.lse[i]); }, naive.lse, exact.lse));

    if (backward) {
        const fa_bwd_params bwd_params = backward_params(work, host, FA_BACKEND_CPU, false);
        const BwdProblem bwd_problem = make_bwd_problem(&bwd_params, varlen);
        progress.begin(label + "reference 3/4: fp64 backward");
        const reference::Gradients exact_grads = reference::backward(bwd_problem, Precision::fp64);
        progress.begin(label + "reference 4/4: " + naive_name + " backward, both forms");
        const reference::Gradients naive_grads = reference::naive_yardstick(bwd_problem, exact_grads);
        progress.end();
        result.tensors.push_back(compare("dq", kBackwardFactor, outputs.dq, naive_grads.dq, exact_grads.dq));
        result.tensors.push_back(compare("dk", kBackwardFactor, outputs.dk, naive_grads.dk, exact_grads.dk));
        result.tensors.push_back(compare("dv", kBackwardFactor, outputs.dv, naive_grads.dv, exact_grads.dv));
        if (!outputs.dsink.empty()) {
            // dsink adds one term per query row of the head, p_sink(i) * rowsum(dO_i * O_i), each
            // carrying the rounding of O to the dtype; terms of both signs cancel, so the floor scales
            // with the sum of their magnitudes (the reference's dsink_magnitude), not with dsink, plus
            // twice the unit roundoff at the root-sum-square of O's rounding (dsink_rounding).
            TensorCheck check = compare_values("dsink", kBackwardFactor, outputs.dsink.size(),
                                               [&](size_t i) { return double(outputs.dsink[i]); }, naive_grads.dsink,
                                               exact_grads.dsink);
            double magnitude = 0.0;
            for (double m : exact_grads.dsink_magnitude) magnitude = std::fmax(magnitude, m);
            double rounding = 0.0;
            for (double r : exact_grads.dsink_rounding) rounding = std::fmax(rounding, r);
            check.bound += sum_floor(work.spec.dtype) * magnitude + 2.0 * reference::unit_roundoff(work.spec.dtype) * rounding;
            check.pass = check.error <= check.bound;
            result.tensors.push_back(check);
        }
    }
    for (const TensorCheck& t : result.tensors) result.pass = result.pass && t.pass;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return result;
}

} // namespace flashattn::cli
