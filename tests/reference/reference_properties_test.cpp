// Properties the reference must have, each checked against something computed independently of it:
// closed forms (uniform keys, explicit ALiBi/softcap formulas), equivalences between features
// (huge softcap = none, covering window = full, GQA = repeated heads, varlen = dense per sequence),
// and the semantics of empty rows and dropout.
#include "support/test_support.h"

#include <flashattn/flashattn.hpp>
#include <flashattn/philox.h>

#include <cmath>

namespace flashattn::testing {
namespace {

using reference::Precision;

Case small(fa_dtype dtype = FA_FLOAT32) {
    Case c;
    c.dtype = dtype;
    c.batch = 2;
    c.seqlen_q = 9;
    c.seqlen_k = 13;
    c.heads = 3;
    c.heads_k = 3;
    c.head_dim = 8;
    return c;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tolerance, const char* what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    const Deviation d = max_deviation(a, b);
    EXPECT_LE(d.max_abs, tolerance) << what << ": at " << d.index << " " << d.ours << " vs " << d.reference;
}

void expect_same_attention(const AttentionRun& a, const AttentionRun& b, double tolerance, bool gradients = true) {
    const auto fa = reference::forward(a.problem(), Precision::fp64, a.c().want_probs);
    const auto fb = reference::forward(b.problem(), Precision::fp64, b.c().want_probs);
    expect_close(fa.out, fb.out, tolerance, "out");
    expect_close(fa.lse, fb.lse, tolerance, "lse");
    if (!gradients) return;
    const auto ga = reference::backward(a.bwd_problem(), Precision::fp64);
    const auto gb = reference::backward(b.bwd_problem(), Precision::fp64);
    expect_close(ga.dq, gb.dq, tolerance, "dq");
    expect_close(ga.dk, gb.dk, tolerance, "dk");
    expect_close(ga.dv, gb.dv, tolerance, "dv");
}

// Copies the view elements of `from` into `to` (same logical shape, any layout).
void copy_values(const Tensor& from, Tensor& to) {
    for (int64_t b = 0; b < from.batch(); ++b)
        for (int64_t s = 0; s < from.rows(); ++s)
            for (int64_t h = 0; h < from.heads(); ++h)
                for (int64_t c = 0; c < from.dim(); ++c) to.set(b, s, h, c, from.get(b, s, h, c));
}

void copy_inputs(const AttentionRun& from, AttentionRun& to) {
    copy_values(from.q, to.q);
    copy_values(from.k, to.k);
    copy_values(from.v, to.v);
    copy_values(from.dout, to.dout);
}

TEST(ReferenceProperties, PlainAttentionMatchesDirectFormula) {
    Case c = small();
    c.layout = Layout::bhsd;
    AttentionRun run(c);
    const auto r = reference::forward(run.problem(), Precision::fp64);
    const double scale = run.problem().scale; // 1/sqrt(d) as the float the API resolves it to
    EXPECT_NEAR(scale, 1.0 / std::sqrt(double(c.head_dim)), 1e-7);
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.heads; ++h)
            for (int i = 0; i < c.seqlen_q; ++i) {
                std::vector<double> w(size_t(c.seqlen_k));
                double total = 0.0;
                for (int j = 0; j < c.seqlen_k; ++j) {
                    double dot = 0.0;
                    for (int d = 0; d < c.head_dim; ++d) dot += double(run.q.get(b, i, h, d)) * run.k.get(b, j, h, d);
                    w[size_t(j)] = std::exp(scale * dot);
                    total += w[size_t(j)];
                }
                const size_t lse_at = size_t((b * c.heads + h) * c.seqlen_q + i);
                EXPECT_NEAR(r.lse[lse_at], std::log(total), 1e-12);
                for (int d = 0; d < c.head_dim; ++d) {
                    double o = 0.0;
                    for (int j = 0; j < c.seqlen_k; ++j) o += w[size_t(j)] / total * run.v.get(b, j, h, d);
                    EXPECT_NEAR(r.out[size_t(((b * c.seqlen_q + i) * c.heads + h) * c.head_dim + d)], o, 1e-12);
                }
            }
}

TEST(ReferenceProperties, SinkMatchesDirectFormulaWithValueHeadDim) {
    Case c = small();
    c.head_dim_v = 5;
    c.learnable_sink = true;
    c.sink_mean = 1.0;
    AttentionRun run(c);
    const auto r = reference::forward(run.problem(), Precision::fp64);
    const double scale = run.problem().scale;
    EXPECT_NEAR(scale, 1.0 / std::sqrt(double(c.head_dim)), 1e-7) << "the default scale follows the q/k head dim";
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.heads; ++h)
            for (int i = 0; i < c.seqlen_q; ++i) {
                const double sink = run.sink[size_t(h)];
                std::vector<double> w(size_t(c.seqlen_k));
                double total = std::exp(sink); // the sink joins the denominator, with no value
                for (int j = 0; j < c.seqlen_k; ++j) {
                    double dot = 0.0;
                    for (int d = 0; d < c.head_dim; ++d) dot += double(run.q.get(b, i, h, d)) * run.k.get(b, j, h, d);
                    w[size_t(j)] = std::exp(scale * dot);
                    total += w[size_t(j)];
                }
                EXPECT_NEAR(r.lse[size_t((b * c.heads + h) * c.seqlen_q + i)], std::log(total), 1e-12);
                for (int d = 0; d < c.head_dim_v; ++d) {
                    double o = 0.0;
                    for (int j = 0; j < c.seqlen_k; ++j) o += w[size_t(j)] / total * run.v.get(b, j, h, d);
                    EXPECT_NEAR(r.out[size_t(((b * c.seqlen_q + i) * c.heads + h) * c.head_dim_v + d)], o, 1e-12);
                }
            }
}

TEST(ReferenceProperties, ValueHeadDimIsTheFirstColumnsOfTheFullValues) {
    Case full = small();
    full.causal = true;
    full.heads_k = 1;
    Case narrow = full;
    narrow.head_dim_v = 3;
    AttentionRun a(full), b(narrow);
    copy_values(a.q, b.q);
    copy_values(a.k, b.k);
    for (int64_t s = 0; s < a.v.rows(); ++s)
        for (int64_t bb = 0; bb < a.v.batch(); ++bb)
            for (int64_t d = 0; d < 3; ++d) b.v.set(bb, s, 0, d, a.v.get(bb, s, 0, d));
    // dout zero beyond the narrow columns: the gradients of q and k then agree too.
    for (int64_t bb = 0; bb < a.dout.batch(); ++bb)
        for (int64_t s = 0; s < a.dout.rows(); ++s)
            for (int64_t h = 0; h < a.dout.heads(); ++h)
                for (int64_t d = 0; d < a.dout.dim(); ++d) {
                    if (d >= 3) a.dout.set(bb, s, h, d, 0.0f);
                    else b.dout.set(bb, s, h, d, a.dout.get(bb, s, h, d));
                }
    const auto fa = reference::forward(a.problem(), Precision::fp64), fb = reference::forward(b.problem(), Precision::fp64);
    const auto ga = reference::backward(a.bwd_problem(), Precision::fp64);
    const auto gb = reference::backward(b.bwd_problem(), Precision::fp64);
    expect_close(fa.lse, fb.lse, 1e-12, "lse");
    expect_close(ga.dq, gb.dq, 1e-12, "dq");
    expect_close(ga.dk, gb.dk, 1e-12, "dk");
    const int64_t rows = int64_t(fa.out.size()) / (int64_t(full.heads) * full.head_dim);
    for (int64_t r = 0; r < rows * full.heads; ++r)
        for (int64_t d = 0; d < 3; ++d)
            EXPECT_NEAR(fb.out[size_t(r * 3 + d)], fa.out[size_t(r * full.head_dim + d)], 1e-12) << "out " << r;
    for (int64_t r = 0; r < int64_t(gb.dv.size()) / 3; ++r)
        for (int64_t d = 0; d < 3; ++d)
            EXPECT_NEAR(gb.dv[size_t(r * 3 + d)], ga.dv[size_t(r * full.head_dim + d)], 1e-12) << "dv " << r;
}

TEST(ReferenceProperties, RowsThatSeeNoKeyWithASinkGiveZeroOutputAndTheSinkAsLse) {
    for (Precision precision : {Precision::fp64, Precision::same_as_inputs}) {
        Case c = small(FA_FLOAT16);
        c.seqlen_q = 11;
        c.seqlen_k = 4; // causal: rows 0..6 see no key
        c.causal = true;
        c.learnable_sink = true;
        AttentionRun run(c);
        const auto f = reference::forward(run.problem(), precision);
        const auto g = reference::backward(run.bwd_problem(), precision);
        for (int b = 0; b < c.batch; ++b)
            for (int i = 0; i < 7; ++i)
                for (int h = 0; h < c.heads; ++h) {
                    EXPECT_EQ(f.lse[size_t((b * c.heads + h) * c.seqlen_q + i)], double(run.sink[size_t(h)]));
                    for (int d = 0; d < c.head_dim; ++d) {
                        const size_t at = size_t(((b * c.seqlen_q + i) * c.heads + h) * c.head_dim + d);
                        EXPECT_EQ(f.out[at], 0.0);
                        EXPECT_EQ(g.dq[at], 0.0);
                    }
                }
        ASSERT_EQ(g.dsink.size(), size_t(c.heads));
        for (double x : g.dsink) EXPECT_TRUE(std::isfinite(x));
    }
}

TEST(ReferenceProperties, AVeryNegativeSinkChangesNothing) {
    Case with = small();
    with.causal = true;
    with.dropout_p = 0.2f;
    with.learnable_sink = true;
    Case without = with;
    without.learnable_sink = false;
    AttentionRun a(with), b(without);
    copy_inputs(a, b);
    std::fill(a.sink.begin(), a.sink.end(), -1000.0f);
    expect_same_attention(a, b, 1e-12);
    const auto g = reference::backward(a.bwd_problem(), Precision::fp64);
    for (double x : g.dsink) EXPECT_EQ(x, 0.0);
}

TEST(ReferenceProperties, UniformKeysGiveMeanOfAllowedValues) {
    Case c = small();
    c.causal = true;
    AttentionRun run(c);
    for (int b = 0; b < c.batch; ++b)
        for (int j = 0; j < c.seqlen_k; ++j)
            for (int h = 0; h < c.heads_k; ++h)
                for (int d = 0; d < c.head_dim; ++d) run.k.set(b, j, h, d, run.k.get(b, 0, h, d));
    const auto r = reference::forward(run.problem(), Precision::fp64);
    for (int b = 0; b < c.batch; ++b)
        for (int i = 0; i < c.seqlen_q; ++i) {
            const int visible = i + c.seqlen_k - c.seqlen_q + 1; // causal, bottom-right aligned
            for (int h = 0; h < c.heads; ++h)
                for (int d = 0; d < c.head_dim; ++d) {
                    double mean = 0.0;
                    for (int j = 0; j < visible; ++j) mean += run.v.get(b, j, h, d);
                    mean /= visible;
                    EXPECT_NEAR(r.out[size_t(((b * c.seqlen_q + i) * c.heads + h) * c.head_dim + d)], mean, 1e-12);
                }
        }
}

TEST(ReferenceProperties, AlibiMatchesExplicitDistancePenalty) {
    // Identical keys: every score is the same, so P is the softmax of the ALiBi bias alone.
    Case c = small();
    c.alibi = Alibi::per_batch_and_head;
    c.want_probs = true;
    AttentionRun run(c);
    for (int b = 0; b < c.batch; ++b)
        for (int j = 0; j < c.seqlen_k; ++j)
            for (int h = 0; h < c.heads_k; ++h)
                for (int d = 0; d < c.head_dim; ++d) run.k.set(b, j, h, d, run.k.get(b, 0, h, d));
    const auto r = reference::forward(run.problem(), Precision::fp64, true);
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.heads; ++h) {
            const double slope = run.alibi_slopes[size_t(b * (c.heads + 1) + h)];
            for (int i = 0; i < c.seqlen_q; ++i) {
                std::vector<double> w(size_t(c.seqlen_k));
                double total = 0.0;
                for (int j = 0; j < c.seqlen_k; ++j) {
                    w[size_t(j)] = std::exp(-slope * std::abs(i + c.seqlen_k - c.seqlen_q - j));
                    total += w[size_t(j)];
                }
                for (int j = 0; j < c.seqlen_k; ++j)
                    EXPECT_NEAR(r.probs[size_t(((b * c.heads + h) * c.seqlen_q + i) * c.seqlen_k + j)], w[size_t(j)] / total,
                                1e-12);
            }
        }
}

TEST(ReferenceProperties, SoftcapMatchesExplicitTanh) {
    Case c = small();
    c.head_dim = 1;
    c.softcap = 0.8f;
    c.softmax_scale = 1.5f;
    c.want_probs = true;
    AttentionRun run(c);
    const auto r = reference::forward(run.problem(), Precision::fp64, true);
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.heads; ++h)
            for (int i = 0; i < c.seqlen_q; ++i) {
                std::vector<double> w(size_t(c.seqlen_k));
                double total = 0.0;
                for (int j = 0; j < c.seqlen_k; ++j) {
                    const double s = 1.5 * double(run.q.get(b, i, h, 0)) * run.k.get(b, j, h, 0);
                    w[size_t(j)] = std::exp(double(0.8f) * std::tanh(s / double(0.8f)));
                    total += w[size_t(j)];
                }
                for (int j = 0; j < c.seqlen_k; ++j)
                    EXPECT_NEAR(r.probs[size_t(((b * c.heads + h) * c.seqlen_q + i) * c.seqlen_k + j)], w[size_t(j)] / total,
                                1e-12);
            }
}

TEST(ReferenceProperties, HugeSoftcapEqualsNoSoftcap) {
    Case c = small();
    AttentionRun plain(c);
    c.softcap = 1e7f;
    AttentionRun capped(c);
    expect_same_attention(plain, capped, 1e-9);
}

TEST(ReferenceProperties, WindowCoveringEverythingEqualsFullAttention) {
    Case c = small();
    AttentionRun full(c);
    c.window_left = c.seqlen_k;
    c.window_right = c.seqlen_k;
    AttentionRun window(c);
    expect_same_attention(full, window, 0.0);
}

TEST(ReferenceProperties, CausalWithOneQueryRowSeesAllKeys) {
    Case c = small();
    c.seqlen_q = 1;
    AttentionRun full(c);
    c.causal = true;
    AttentionRun causal(c);
    expect_same_attention(full, causal, 0.0);
}

TEST(ReferenceProperties, WindowUnboundedLeftZeroRightEqualsCausal) {
    Case c = small();
    c.causal = true;
    AttentionRun causal(c);
    c.causal = false;
    c.window_left = -1;
    c.window_right = 0;
    AttentionRun window(c);
    expect_same_attention(causal, window, 0.0);
}

TEST(ReferenceProperties, MasksAreBottomRightAligned) {
    Case c = small();
    c.seqlen_q = 4;
    c.seqlen_k = 9;
    c.window_left = 2;
    c.window_right = 1;
    c.want_probs = true;
    AttentionRun run(c);
    const auto r = reference::forward(run.problem(), Precision::fp64, true);
    for (int i = 0; i < c.seqlen_q; ++i) {
        const int diagonal = i + c.seqlen_k - c.seqlen_q; // query i sits at key position 5 + i
        for (int j = 0; j < c.seqlen_k; ++j) {
            const bool allowed = j >= diagonal - 2 && j <= diagonal + 1;
            EXPECT_EQ(r.probs[size_t(i * c.seqlen_k + j)] > 0.0, allowed) << "row " << i << " key " << j;
        }
    }
}

TEST(ReferenceProperties, RowsThatSeeNoKeyGiveZeroOutputMinusInfLseAndZeroGradient) {
    for (Precision precision : {Precision::fp64, Precision::same_as_inputs}) {
        Case c = small(FA_FLOAT16);
        c.seqlen_q = 11;
        c.seqlen_k = 4; // causal: rows 0..6 are above the bottom-right diagonal
        c.causal = true;
        c.seqused_k = {4, 0}; // and the whole second sequence has no key at all
        AttentionRun run(c);
        const auto f = reference::forward(run.problem(), precision);
        const auto g = reference::backward(run.bwd_problem(), precision);
        for (int b = 0; b < c.batch; ++b)
            for (int i = 0; i < c.seqlen_q; ++i) {
                const bool empty = b == 1 || i < 7;
                for (int h = 0; h < c.heads; ++h) {
                    const double lse = f.lse[size_t((b * c.heads + h) * c.seqlen_q + i)];
                    EXPECT_FALSE(std::isnan(lse));
                    if (empty) {
                        EXPECT_EQ(lse, -INFINITY) << "b" << b << " row " << i;
                    } else {
                        EXPECT_TRUE(std::isfinite(lse));
                    }
                    for (int d = 0; d < c.head_dim; ++d) {
                        const size_t at = size_t(((b * c.seqlen_q + i) * c.heads + h) * c.head_dim + d);
                        EXPECT_FALSE(std::isnan(f.out[at]) || std::isnan(g.dq[at]));
                        if (empty) {
                            EXPECT_EQ(f.out[at], 0.0);
                            EXPECT_EQ(g.dq[at], 0.0);
                        }
                    }
                }
            }
        for (double x : g.dk) EXPECT_FALSE(std::isnan(x));
        // Keys of the sequence that uses none of them get no gradient.
        for (size_t at = size_t(c.seqlen_k * c.heads_k * c.head_dim); at < g.dk.size(); ++at) {
            EXPECT_EQ(g.dk[at], 0.0);
            EXPECT_EQ(g.dv[at], 0.0);
        }
    }
}

TEST(ReferenceProperties, ProbabilitiesOfEachRowSumToOne) {
    Case c = small();
    c.window_left = 3;
    c.softcap = 2.0f;
    c.alibi = Alibi::per_head;
    c.want_probs = true;
    AttentionRun run(c);
    const auto r = reference::forward(run.problem(), Precision::fp64, true);
    for (int64_t row = 0; row < int64_t(c.batch) * c.heads * c.seqlen_q; ++row) {
        double total = 0.0;
        for (int j = 0; j < c.seqlen_k; ++j) total += r.probs[size_t(row * c.seqlen_k + j)];
        EXPECT_NEAR(total, 1.0, 1e-12) << "row " << row;
    }
}

TEST(ReferenceProperties, KeyOrderDoesNotMatterWithoutPositionalTerms) {
    Case c = small();
    c.softcap = 3.0f;
    AttentionRun a(c), b(c);
    copy_inputs(a, b);
    for (int bi = 0; bi < c.batch; ++bi)
        for (int j = 0; j < c.seqlen_k; ++j)
            for (int h = 0; h < c.heads_k; ++h)
                for (int d = 0; d < c.head_dim; ++d) {
                    const int from = c.seqlen_k - 1 - j; // reversed
                    b.k.set(bi, j, h, d, a.k.get(bi, from, h, d));
                    b.v.set(bi, j, h, d, a.v.get(bi, from, h, d));
                }
    expect_same_attention(a, b, 1e-12, false);
}

TEST(ReferenceProperties, SoftmaxScaleFoldsIntoQueries) {
    Case c = small();
    c.softmax_scale = 0.5f;
    AttentionRun a(c);
    c.softmax_scale = 0.25f;
    AttentionRun b(c);
    copy_inputs(a, b);
    for (int bi = 0; bi < c.batch; ++bi)
        for (int i = 0; i < c.seqlen_q; ++i)
            for (int h = 0; h < c.heads; ++h)
                for (int d = 0; d < c.head_dim; ++d) b.q.set(bi, i, h, d, 2.0f * a.q.get(bi, i, h, d));
    expect_same_attention(a, b, 1e-12, false);
}

TEST(ReferenceProperties, GroupedQueryAttentionEqualsRepeatedKeyValueHeads) {
    Case c = small();
    c.heads = 6;
    c.heads_k = 2;
    c.causal = true;
    c.dropout_p = 0.2f;
    c.alibi = Alibi::per_head;
    AttentionRun gqa(c);
    c.heads_k = 6;
    AttentionRun mha(c);
    copy_values(gqa.q, mha.q);
    copy_values(gqa.dout, mha.dout);
    for (int b = 0; b < c.batch; ++b)
        for (int j = 0; j < c.seqlen_k; ++j)
            for (int h = 0; h < 6; ++h)
                for (int d = 0; d < c.head_dim; ++d) {
                    mha.k.set(b, j, h, d, gqa.k.get(b, j, h / 3, d));
                    mha.v.set(b, j, h, d, gqa.v.get(b, j, h / 3, d));
                }
    const auto f1 = reference::forward(gqa.problem(), Precision::fp64);
    const auto f2 = reference::forward(mha.problem(), Precision::fp64);
    expect_close(f1.out, f2.out, 0.0, "out");
    const auto g1 = reference::backward(gqa.bwd_problem(), Precision::fp64);
    const auto g2 = reference::backward(mha.bwd_problem(), Precision::fp64);
    expect_close(g1.dq, g2.dq, 0.0, "dq");
    // dK/dV of a KV head = sum over the query heads that share it.
    std::vector<double> summed_dk(g1.dk.size(), 0.0), summed_dv(g1.dv.size(), 0.0);
    for (int64_t row = 0; row < int64_t(c.batch) * c.seqlen_k; ++row)
        for (int h = 0; h < 6; ++h)
            for (int d = 0; d < c.head_dim; ++d) {
                summed_dk[size_t((row * 2 + h / 3) * c.head_dim + d)] += g2.dk[size_t((row * 6 + h) * c.head_dim + d)];
                summed_dv[size_t((row * 2 + h / 3) * c.head_dim + d)] += g2.dv[size_t((row * 6 + h) * c.head_dim + d)];
            }
    expect_close(g1.dk, summed_dk, 1e-12, "dk");
    expect_close(g1.dv, summed_dv, 1e-12, "dv");
}

TEST(ReferenceProperties, VarlenEqualsDenseSequenceBySequence) {
    Case packed = small();
    packed.varlen = true;
    packed.q_lens = {5, 0, 9, 3};
    packed.k_lens = {7, 4, 2, 8};
    packed.seqused_k = {6, 4, 2, 1};
    packed.spare_rows = 3;
    packed.causal = true;
    packed.softcap = 4.0f;
    packed.alibi = Alibi::per_head;
    packed.layout = Layout::padded;
    AttentionRun varlen(packed);
    const auto fv = reference::forward(varlen.problem(), Precision::fp64);
    const auto gv = reference::backward(varlen.bwd_problem(), Precision::fp64);
    const int H = packed.heads, D = packed.head_dim;
    for (size_t s = 0; s < packed.q_lens.size(); ++s) {
        Case dense = packed;
        dense.varlen = false;
        dense.batch = 1;
        dense.seqlen_q = packed.q_lens[s];
        dense.seqlen_k = packed.k_lens[s];
        dense.seqused_k = {packed.seqused_k[s]};
        dense.layout = Layout::bshd;
        AttentionRun one(dense);
        const int q0 = varlen.cu_seqlens_q[s], k0 = varlen.cu_seqlens_k[s];
        for (int i = 0; i < dense.seqlen_q; ++i)
            for (int h = 0; h < H; ++h)
                for (int d = 0; d < D; ++d) {
                    one.q.set(0, i, h, d, varlen.q.get(0, q0 + i, h, d));
                    one.dout.set(0, i, h, d, varlen.dout.get(0, q0 + i, h, d));
                }
        for (int j = 0; j < dense.seqlen_k; ++j)
            for (int h = 0; h < packed.heads_k; ++h)
                for (int d = 0; d < D; ++d) {
                    one.k.set(0, j, h, d, varlen.k.get(0, k0 + j, h, d));
                    one.v.set(0, j, h, d, varlen.v.get(0, k0 + j, h, d));
                }
        const auto fd = reference::forward(one.problem(), Precision::fp64);
        const auto gd = reference::backward(one.bwd_problem(), Precision::fp64);
        for (int i = 0; i < dense.seqlen_q; ++i)
            for (int h = 0; h < H; ++h) {
                EXPECT_EQ(fv.lse[size_t(h * varlen.total_q + q0 + i)], fd.lse[size_t(h * dense.seqlen_q + i)]);
                for (int d = 0; d < D; ++d) {
                    EXPECT_EQ(fv.out[size_t(((q0 + i) * H + h) * D + d)], fd.out[size_t((i * H + h) * D + d)]);
                    EXPECT_EQ(gv.dq[size_t(((q0 + i) * H + h) * D + d)], gd.dq[size_t((i * H + h) * D + d)]);
                }
            }
        for (int j = 0; j < dense.seqlen_k; ++j)
            for (int h = 0; h < packed.heads_k; ++h)
                for (int d = 0; d < D; ++d) {
                    EXPECT_EQ(gv.dk[size_t(((k0 + j) * packed.heads_k + h) * D + d)], gd.dk[size_t((j * packed.heads_k + h) * D + d)]);
                    EXPECT_EQ(gv.dv[size_t(((k0 + j) * packed.heads_k + h) * D + d)], gd.dv[size_t((j * packed.heads_k + h) * D + d)]);
                }
    }
    // Spare rows that belong to no sequence stay zero / -inf.
    for (int64_t row = varlen.cu_seqlens_q.back(); row < varlen.total_q; ++row)
        for (int h = 0; h < H; ++h) EXPECT_EQ(fv.lse[size_t(h * varlen.total_q + row)], -INFINITY);
}

TEST(ReferenceProperties, SequsedKEqualsTruncatedKeys) {
    Case c = small();
    c.causal = true;
    c.alibi = Alibi::per_head;
    c.seqused_k = {13, 6};
    AttentionRun limited(c);
    c.seqused_k.clear();
    c.batch = 1;
    c.seqlen_k = 6;
    AttentionRun truncated(c);
    // Sequence 1 of `limited` against a dense problem that only has its first 6 keys.
    for (int i = 0; i < c.seqlen_q; ++i)
        for (int h = 0; h < c.heads; ++h)
            for (int d = 0; d < c.head_dim; ++d) truncated.q.set(0, i, h, d, limited.q.get(1, i, h, d));
    for (int j = 0; j < 6; ++j)
        for (int h = 0; h < c.heads; ++h)
            for (int d = 0; d < c.head_dim; ++d) {
                truncated.k.set(0, j, h, d, limited.k.get(1, j, h, d));
                truncated.v.set(0, j, h, d, limited.v.get(1, j, h, d));
            }
    const auto fl = reference::forward(limited.problem(), Precision::fp64);
    const auto ft = reference::forward(truncated.problem(), Precision::fp64);
    const size_t per_sequence = size_t(c.seqlen_q * c.heads * c.head_dim);
    const std::vector<double> second(fl.out.begin() + long(per_sequence), fl.out.end());
    expect_close(second, ft.out, 0.0, "out of the limited sequence");
}

TEST(ReferenceProperties, LayoutsDoNotChangeTheResult) {
    Case c = small(FA_BFLOAT16);
    c.causal = true;
    c.heads = 6;
    c.heads_k = 2;
    AttentionRun contiguous(c);
    for (Layout layout : {Layout::bhsd, Layout::padded}) {
        c.layout = layout;
        AttentionRun strided(c);
        copy_inputs(contiguous, strided);
        for (Precision precision : {Precision::fp64, Precision::same_as_inputs}) {
            const auto a = reference::forward(contiguous.problem(), precision);
            const auto b = reference::forward(strided.problem(), precision);
            expect_close(a.out, b.out, 0.0, layout_name(layout));
            const auto ga = reference::backward(contiguous.bwd_problem(), precision);
            const auto gb = reference::backward(strided.bwd_problem(), precision);
            expect_close(ga.dk, gb.dk, 0.0, layout_name(layout));
        }
    }
}

TEST(ReferenceProperties, DropoutKeepsExactlyThePhiloxMaskAndRescales) {
    Case c = small();
    c.batch = 2;
    c.heads = 4;
    c.heads_k = 4;
    c.seqlen_q = 64;
    c.seqlen_k = 96;
    c.dropout_p = 0.17f;
    c.rng_seed = 0x123456789abcull;
    c.rng_offset = (7ull << 32) | 12345u;
    c.want_probs = true;
    AttentionRun run(c);
    const auto r = reference::forward(run.problem(), Precision::fp64, true);
    const uint32_t threshold = dropout_keep_threshold(c.dropout_p);
    int64_t dropped = 0, total = 0;
    std::vector<double> out(r.out.size(), 0.0);
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.heads; ++h)
            for (int i = 0; i < c.seqlen_q; ++i) {
                const DropoutRow rng(c.rng_seed, c.rng_offset, b, c.heads, h, i);
                for (int j = 0; j < c.seqlen_k; ++j) {
                    const double p = r.probs[size_t(((b * c.heads + h) * c.seqlen_q + i) * c.seqlen_k + j)];
                    const bool kept = rng.bits_for_column(j) < threshold;
                    ASSERT_EQ(!std::signbit(p), kept) << "b" << b << " h" << h << " i" << i << " j" << j;
                    dropped += !kept;
                    ++total;
                    if (!kept) continue;
                    for (int d = 0; d < c.head_dim; ++d)
                        out[size_t(((b * c.seqlen_q + i) * c.heads + h) * c.head_dim + d)] +=
                            p / (1.0 - double(c.dropout_p)) * run.v.get(b, j, h, d);
                }
            }
    EXPECT_NEAR(double(dropped) / double(total), c.dropout_p, 0.01);
    expect_close(r.out, out, 1e-12, "out = (P * mask / (1 - p)) V");
}

TEST(ReferenceProperties, ZeroDropoutIgnoresTheGeneratorState) {
    Case c = small();
    c.rng_seed = 1;
    AttentionRun a(c);
    c.rng_seed = 99;
    c.rng_offset = 5;
    AttentionRun b(c);
    copy_inputs(a, b);
    expect_same_attention(a, b, 0.0);
}

TEST(ReferenceProperties, PerBatchAlibiWithEqualSlopesEqualsPerHead) {
    Case c = small();
    c.alibi = Alibi::per_head;
    AttentionRun per_head(c);
    c.alibi = Alibi::per_batch_and_head;
    AttentionRun per_batch(c);
    copy_inputs(per_head, per_batch);
    for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.heads; ++h) per_batch.alibi_slopes[size_t(b * (c.heads + 1) + h)] = per_head.alibi_slopes[size_t(h)];
    expect_same_attention(per_head, per_batch, 0.0);
}

TEST(ReferenceSamePrecision, Fp32IsCloseToFp64AndHalfPrecisionsAreNot) {
    for (fa_dtype dtype : {FA_FLOAT32, FA_FLOAT16, FA_BFLOAT16}) {
        Case c = small(dtype);
        c.seqlen_q = 40;
        c.seqlen_k = 70;
        c.head_dim = 64;
        AttentionRun run(c);
        const auto exact = reference::forward(run.problem(), Precision::fp64);
        const auto naive = reference::forward(run.problem(), Precision::same_as_inputs);
        const double error = max_deviation(naive.out, exact.out).max_abs;
        const double unit = dtype == FA_FLOAT32 ? 1.2e-7 : dtype == FA_FLOAT16 ? 1.0 / 1024 : 1.0 / 128;
        EXPECT_GT(error, 0.0) << dtype_short(dtype);
        EXPECT_LT(error, 8 * unit) << dtype_short(dtype);
        if (dtype != FA_FLOAT32) {
            EXPECT_GT(error, unit / 16) << dtype_short(dtype) << ": outputs must be rounded";
        }
    }
}

TEST(ReferenceInputs, VarlenProbabilitiesArePaddedAndMalformedSequenceArraysRejected) {
    Case c = small();
    c.varlen = true;
    c.q_lens = {3, 4};
    c.k_lens = {5, 2};
    AttentionRun run(c);
    // (batch, heads, max_seqlen_q, max_seqlen_k): each sequence's rows sum to 1, 0 past its lengths.
    const auto result = reference::forward(run.problem(), Precision::fp64, true);
    const int64_t heads = c.heads, sq = 4, sk = 5;
    ASSERT_EQ(result.probs.size(), size_t(2 * heads * sq * sk));
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < heads; ++h)
            for (int64_t i = 0; i < sq; ++i) {
                double sum = 0.0;
                for (int64_t j = 0; j < sk; ++j) {
                    const double p = result.probs[size_t(((b * heads + h) * sq + i) * sk + j)];
                    if (i >= c.q_lens[size_t(b)] || j >= c.k_lens[size_t(b)]) EXPECT_EQ(p, 0.0);
                    sum += std::abs(p);
                }
                EXPECT_NEAR(sum, i < c.q_lens[size_t(b)] ? 1.0 : 0.0, 1e-12) << b << " " << h << " " << i;
            }
    run.seqused_k = {6, 1}; // 6 > the first sequence's 5 keys
    try {
        reference::forward(run.problem(), Precision::fp64);
        ADD_FAILURE() << "seqused_k out of range was accepted";
    } catch (const flashattn::Error& e) {
        EXPECT_NE(std::string(e.what()).find("seqused_k"), std::string::npos) << e.what();
    }
}

} // namespace
} // namespace flashattn::testing
