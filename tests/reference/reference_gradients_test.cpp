// The reference's analytic backward against central finite differences of its own forward, in
// double, for every feature. Inputs are fp32 multiples of 2^-6 so that x +- 2^-12 is exact: the
// difference quotient then has only its O(h^2) truncation error.
#include "support/test_support.h"

namespace flashattn::testing {
namespace {

using reference::Precision;

constexpr double kStep = 1.0 / 4096.0;

struct GradCase {
    std::string name;
    Case c;
};

Case tiny() {
    Case c;
    c.dtype = FA_FLOAT32;
    c.batch = 2;
    c.seqlen_q = 5;
    c.seqlen_k = 7;
    c.heads = 4;
    c.heads_k = 4;
    c.head_dim = 3;
    return c;
}

std::vector<GradCase> grad_cases() {
    std::vector<GradCase> cases;
    auto add = [&](const std::string& name, auto&& edit) {
        Case c = tiny();
        edit(c);
        cases.push_back({name, c});
    };
    add("plain", [](Case&) {});
    add("causal_with_rows_that_see_no_key", [](Case& c) { c.causal = true; c.seqlen_q = 7; c.seqlen_k = 4; });
    add("causal_seqlen_q_smaller", [](Case& c) { c.causal = true; });
    add("local_window", [](Case& c) { c.window_left = 1; c.window_right = 2; });
    add("softcap", [](Case& c) { c.softcap = 1.5f; });
    add("alibi_per_head", [](Case& c) { c.alibi = Alibi::per_head; });
    add("alibi_per_batch_and_head", [](Case& c) { c.alibi = Alibi::per_batch_and_head; c.causal = true; });
    add("gqa_4_to_2", [](Case& c) { c.heads_k = 2; });
    add("mqa", [](Case& c) { c.heads_k = 1; });
    add("dropout", [](Case& c) { c.dropout_p = 0.3f; });
    add("custom_scale", [](Case& c) { c.softmax_scale = 0.7f; });
    add("seqused_k", [](Case& c) { c.seqused_k = {4, 0}; });
    add("varlen_with_empty_sequences_and_seqused_k", [](Case& c) {
        c.varlen = true;
        c.q_lens = {3, 0, 4, 2};
        c.k_lens = {5, 3, 0, 6};
        c.seqused_k = {4, 3, 0, 5};
        c.spare_rows = 2;
        c.causal = true;
    });
    add("head_dim_v_smaller", [](Case& c) { c.head_dim_v = 2; });
    add("head_dim_v_larger_gqa", [](Case& c) { c.head_dim_v = 5; c.heads_k = 2; c.causal = true; });
    add("sink", [](Case& c) { c.learnable_sink = true; });
    add("sink_with_rows_that_see_no_key", [](Case& c) {
        c.learnable_sink = true;
        c.causal = true;
        c.seqlen_q = 7;
        c.seqlen_k = 4;
    });
    add("sink_dropout_softcap_alibi", [](Case& c) {
        c.learnable_sink = true;
        c.dropout_p = 0.3f;
        c.softcap = 1.5f;
        c.alibi = Alibi::per_head;
    });
    add("sink_head_dim_v_varlen", [](Case& c) {
        c.learnable_sink = true;
        c.head_dim_v = 4;
        c.heads_k = 1;
        c.varlen = true;
        c.q_lens = {3, 0, 4, 2};
        c.k_lens = {5, 3, 0, 6};
        c.window_left = 2;
        c.window_right = 1;
    });
    add("everything_combined", [](Case& c) {
        c.heads_k = 2;
        c.causal = true;
        c.window_left = 3;
        c.softcap = 2.0f;
        c.alibi = Alibi::per_head;
        c.dropout_p = 0.25f;
        c.layout = Layout::padded;
        c.learnable_sink = true;
        c.head_dim_v = 2;
    });
    return cases;
}

class ReferenceGradientTest : public ::testing::TestWithParam<GradCase> {};

double loss(const AttentionRun& run, const std::vector<double>& dout) {
    const auto result = reference::forward(run.problem(), Precision::fp64);
    double sum = 0.0;
    for (size_t i = 0; i < dout.size(); ++i) sum += result.out[i] * dout[i];
    return sum;
}

// Central differences of L = sum(out * dout) with respect to every element of `t`, compared to
// `analytic` (canonical layout, the same as Tensor::canonical()).
void expect_matches_finite_differences(const char* what, AttentionRun& run, Tensor& t, const std::vector<double>& analytic) {
    const std::vector<double> dout = run.dout.canonical();
    double worst = 0.0, scale = 1.0;
    std::string where;
    int64_t index = 0;
    for (int64_t b = 0; b < t.batch(); ++b)
        for (int64_t s = 0; s < t.rows(); ++s)
            for (int64_t h = 0; h < t.heads(); ++h)
                for (int64_t c = 0; c < t.dim(); ++c, ++index) {
                    const float x = t.get(b, s, h, c);
                    t.set(b, s, h, c, float(x + kStep));
                    const double up = loss(run, dout);
                    t.set(b, s, h, c, float(x - kStep));
                    const double down = loss(run, dout);
                    t.set(b, s, h, c, x);
                    const double numeric = (up - down) / (2 * kStep);
                    const double error = std::fabs(numeric - analytic[size_t(index)]);
                    scale = std::max(scale, std::fabs(numeric));
                    if (error > worst) {
                        worst = error;
                        where = "[" + std::to_string(b) + "," + std::to_string(s) + "," + std::to_string(h) + "," +
                                std::to_string(c) + "] analytic " + std::to_string(analytic[size_t(index)]) +
                                " numeric " + std::to_string(numeric);
                    }
                }
    EXPECT_LE(worst, 2e-7 * scale) << what << ": worst difference at " << where;
}

TEST_P(ReferenceGradientTest, AnalyticGradientsMatchFiniteDifferences) {
    Case c = GetParam().c;
    AttentionRun run(c);
    std::mt19937_64 rng(seed_from(GetParam().name));
    run.q.fill_coarse(rng);
    run.k.fill_coarse(rng);
    run.v.fill_coarse(rng);
    run.dout.fill_coarse(rng);

    // Sinks as multiples of 2^-6 too (sink +- 2^-12 exact), over the scores' range.
    for (float& sink : run.sink) sink = float(int64_t(rng() % 257) - 128) / 64.0f;

    const auto grads = reference::backward(run.bwd_problem(), Precision::fp64);
    expect_matches_finite_differences("dq", run, run.q, grads.dq);
    expect_matches_finite_differences("dk", run, run.k, grads.dk);
    expect_matches_finite_differences("dv", run, run.v, grads.dv);
    if (!c.learnable_sink) return;
    ASSERT_EQ(grads.dsink.size(), size_t(c.heads));
    const std::vector<double> dout = run.dout.canonical();
    for (int h = 0; h < c.heads; ++h) {
        const float x = run.sink[size_t(h)];
        run.sink[size_t(h)] = float(x + kStep);
        const double up = loss(run, dout);
        run.sink[size_t(h)] = float(x - kStep);
        const double down = loss(run, dout);
        run.sink[size_t(h)] = x;
        const double numeric = (up - down) / (2 * kStep);
        EXPECT_NEAR(grads.dsink[size_t(h)], numeric, 2e-7 * std::max(1.0, std::fabs(numeric))) << "dsink[" << h << "]";
    }
}

TEST_P(ReferenceGradientTest, Fp32SamePrecisionGradientsAreCloseToFp64) {
    AttentionRun run(GetParam().c);
    const auto exact = reference::backward(run.bwd_problem(), Precision::fp64);
    const auto naive = reference::backward(run.bwd_problem(), Precision::same_as_inputs);
    for (auto [name, a, b] : {std::tuple{"dq", &exact.dq, &naive.dq}, std::tuple{"dk", &exact.dk, &naive.dk},
                              std::tuple{"dv", &exact.dv, &naive.dv}, std::tuple{"dsink", &exact.dsink, &naive.dsink}}) {
        const Deviation d = max_deviation(*b, *a);
        EXPECT_LE(d.max_abs, 1e-5 * std::max(1.0, max_abs(*a))) << name;
    }
}

INSTANTIATE_TEST_SUITE_P(Features, ReferenceGradientTest, ::testing::ValuesIn(grad_cases()),
                         [](const auto& info) { return info.param.name; });

// Half-precision yardstick: it must differ from fp64 (else the tolerance rule degenerates to the
// floor) but only by rounding-sized amounts.
TEST(ReferenceSamePrecision, HalfPrecisionGradientsCarryRoundingErrorOnly) {
    for (fa_dtype dtype : {FA_FLOAT16, FA_BFLOAT16}) {
        Case c;
        c.dtype = dtype;
        c.seqlen_q = 33;
        c.seqlen_k = 47;
        c.head_dim = 40;
        c.causal = true;
        c.softcap = 5.0f;
        AttentionRun run(c);
        const auto exact = reference::backward(run.bwd_problem(), Precision::fp64);
        const auto naive = reference::backward(run.bwd_problem(), Precision::same_as_inputs);
        const double unit = dtype == FA_FLOAT16 ? 1.0 / 1024 : 1.0 / 128;
        for (auto [name, a, b] : {std::tuple{"dq", &exact.dq, &naive.dq}, std::tuple{"dk", &exact.dk, &naive.dk},
                                  std::tuple{"dv", &exact.dv, &naive.dv}}) {
            const Deviation d = max_deviation(*b, *a);
            EXPECT_GT(d.max_abs, 0.0) << dtype_short(dtype) << " " << name;
            EXPECT_LE(d.max_abs, 16 * unit * std::max(1.0, max_abs(*a))) << dtype_short(dtype) << " " << name;
        }
    }
}

} // namespace
} // namespace flashattn::testing
