// A value head dim unlike the query's (head_dim_v) and learnable sinks, alone and with every other
// feature, through the C ABI against the fp64 reference: out, lse, attn_probs, dq, dk, dv and dsink
// within FlashAttention's tolerance rule, on every backend (both compute every case: a refusal is a
// failure).
#include "cases.h"

#include <cstring>
#include <functional>

namespace flashattn::testing {
namespace {

using Edit = std::function<void(Case&)>;

Case dense(fa_dtype dtype, int batch, int seqlen_q, int seqlen_k, int heads, int heads_k, int head_dim,
           int head_dim_v, bool sink, const Edit& edit = [](Case&) {}) {
    Case c = dense_case(dtype, batch, seqlen_q, seqlen_k, heads, heads_k, head_dim);
    c.head_dim_v = head_dim_v;
    c.learnable_sink = sink;
    edit(c);
    return c;
}

Case packed(fa_dtype dtype, std::vector<int> q_lens, std::vector<int> k_lens, int heads, int heads_k, int head_dim,
            int head_dim_v, bool sink, const Edit& edit = [](Case&) {}) {
    Case c = dense(dtype, 1, 0, 0, heads, heads_k, head_dim, head_dim_v, sink, edit);
    c.varlen = true;
    c.q_lens = std::move(q_lens);
    c.k_lens = std::move(k_lens);
    return c;
}

std::vector<Case> value_dim_and_sink_cases(Backend backend) {
    std::vector<Case> cases;
    const fa_dtype kAll[] = {FA_FLOAT16, FA_BFLOAT16, FA_FLOAT32};
    // The pairs models use (DeepSeek's 192/128), smaller and larger value dims, odd widths.
    for (fa_dtype dt : kAll) {
        cases.push_back(dense(dt, 2, 97, 97, 2, 2, 192, 128, false, [](Case& c) { c.causal = true; }));
        cases.push_back(dense(dt, 2, 113, 203, 2, 2, 128, 64, false));
        cases.push_back(dense(dt, 2, 80, 80, 2, 2, 64, 64, true));
        cases.push_back(dense(dt, 2, 113, 203, 4, 2, 64, 64, true, [](Case& c) { c.causal = true; }));
    }
    cases.push_back(dense(FA_FLOAT16, 2, 77, 91, 2, 2, 64, 128, false));
    cases.push_back(dense(FA_BFLOAT16, 2, 77, 91, 2, 2, 59, 40, true, [](Case& c) { c.causal = true; }));
    cases.push_back(dense(FA_FLOAT32, 2, 33, 47, 2, 2, 1, 3, true));
    cases.push_back(dense(FA_FLOAT16, 2, 33, 47, 2, 2, 256, 8, true));
    // Sinks with every feature: rows that see no key (out 0, lse = the sink), windows, seqused_k,
    // softcap, ALiBi, dropout, GQA/MQA, sinks that dominate or vanish, strided layouts.
    cases.push_back(dense(FA_FLOAT16, 2, 203, 113, 2, 2, 64, 0, true, [](Case& c) { c.causal = true; c.window_left = 0; }));
    cases.push_back(dense(FA_BFLOAT16, 2, 113, 203, 2, 2, 64, 32, true, [](Case& c) {
        c.window_left = 10; c.window_right = 10; c.seqused_k = {0, 150}; }));
    cases.push_back(dense(FA_FLOAT16, 2, 128, 217, 3, 3, 96, 64, true, [](Case& c) {
        c.softcap = 5.0f; c.alibi = Alibi::per_batch_and_head; c.causal = true; }));
    cases.push_back(dense(FA_BFLOAT16, 2, 113, 203, 2, 2, 64, 0, true, [](Case& c) { c.dropout_p = 0.17f; }));
    cases.push_back(dense(FA_FLOAT16, 2, 203, 113, 6, 1, 64, 32, true, [](Case& c) { c.dropout_p = 0.3f; c.causal = true; }));
    cases.push_back(dense(FA_BFLOAT16, 2, 97, 131, 6, 2, 128, 64, true, [](Case& c) { c.sink_mean = 6.0; }));
    cases.push_back(dense(FA_FLOAT16, 2, 97, 131, 2, 2, 64, 0, true, [](Case& c) { c.sink_mean = -8.0; c.causal = true; }));
    cases.push_back(dense(FA_FLOAT32, 2, 70, 90, 2, 2, 59, 17, true, [](Case& c) { c.input_stddev = 4.0; c.softmax_scale = 0.9f; }));
    for (fa_dtype dt : {FA_FLOAT16, FA_BFLOAT16}) {
        cases.push_back(dense(dt, 2, 113, 203, 6, 2, 96, 64, true, [](Case& c) {
            c.causal = true; c.softcap = 20.0f; c.alibi = Alibi::per_head; c.dropout_p = 0.1f; c.layout = Layout::padded; }));
        cases.push_back(dense(dt, 1, 128, 217, 6, 1, 40, 72, true, [](Case& c) {
            c.window_left = 20; c.window_right = 7; c.softcap = 5.0f; c.layout = Layout::bhsd; }));
    }
    // Split-KV and decode shapes (the CPU packs a GQA group into one tile): the sink counts once.
    for (int splits : {0, 3}) {
        cases.push_back(dense(FA_BFLOAT16, 3, 1, 700, 8, 2, 128, 64, true, [splits](Case& c) { c.num_splits = splits; }));
        cases.push_back(dense(FA_FLOAT16, 2, 5, 400, 4, 4, 64, 64, true, [splits](Case& c) {
            c.num_splits = splits; c.causal = true; c.alibi = Alibi::per_head; }));
        cases.push_back(dense(FA_FLOAT32, 2, 64, 300, 4, 2, 64, 32, false, [splits](Case& c) { c.num_splits = splits; }));
    }
    cases.push_back(dense(FA_FLOAT16, 2, 40, 90, 4, 2, 64, 32, true, [](Case& c) {
        c.num_splits = 4; c.window_left = 0; c.window_right = -1; c.seqused_k = {90, 0}; }));
    // A larger one.
    cases.push_back(dense(FA_BFLOAT16, 1, 384, 512, 4, 2, 192, 128, true, [](Case& c) { c.causal = true; }));
    // The default (non-deterministic) backward: dsink's terms added atomically.
    cases.push_back(dense(FA_BFLOAT16, 2, 300, 300, 4, 2, 128, 64, true, [](Case& c) { c.deterministic = false; c.causal = true; }));
    cases.push_back(dense(FA_FLOAT16, 2, 97, 131, 6, 2, 64, 128, true, [](Case& c) { c.deterministic = false; }));
    return named_cases(cases, backend);
}

std::vector<Case> varlen_value_dim_and_sink_cases(Backend backend) {
    const std::vector<int> q_lens{37, 0, 1, 128, 77, 9}, k_lens{53, 11, 0, 97, 201, 9};
    std::vector<Case> cases;
    for (fa_dtype dt : {FA_FLOAT16, FA_BFLOAT16, FA_FLOAT32})
        cases.push_back(packed(dt, q_lens, k_lens, 4, 2, 96, 64, true, [](Case& c) { c.causal = true; }));
    cases.push_back(packed(FA_FLOAT16, q_lens, k_lens, 6, 2, 40, 24, true, [](Case& c) {
        c.seqused_k = {20, 11, 0, 97, 0, 4}; c.causal = true; c.spare_rows = 5; }));
    cases.push_back(packed(FA_BFLOAT16, q_lens, k_lens, 4, 1, 64, 128, true, [](Case& c) {
        c.dropout_p = 0.15f; c.alibi = Alibi::per_batch_and_head; c.layout = Layout::padded; }));
    cases.push_back(packed(FA_BFLOAT16, q_lens, k_lens, 2, 2, 64, 32, false, [](Case& c) {
        c.window_left = 16; c.window_right = 3; c.softcap = 15.0f; }));
    cases.push_back(packed(FA_FLOAT16, {1, 1, 1, 1}, {300, 1, 0, 77}, 8, 2, 128, 64, true, [](Case& c) { c.num_splits = 0; }));
    return named_cases(cases, backend);
}

#define FA_RUN_OK(call, run) ASSERT_EQ((call), FA_OK) << (run).last_error()

class ValueDimAndSink : public ::testing::TestWithParam<Case> {
protected:
    void SetUp() override { FA_SKIP_IF_UNAVAILABLE(GetParam().backend); }
};

TEST_P(ValueDimAndSink, ForwardMatchesReference) {
    AttentionRun run(GetParam());
    FA_RUN_OK(run.forward(), run);
    expect_forward_matches_reference(run);
}

TEST_P(ValueDimAndSink, ForwardAttnProbsMatchReference) {
    Case c = GetParam();
    if (int64_t(c.batch) * c.heads * c.seqlen_q * c.seqlen_k > (1 << 20)) GTEST_SKIP() << "attn_probs: case too large";
    c.want_probs = true;
    AttentionRun run(c);
    FA_RUN_OK(run.forward(), run);
    expect_forward_matches_reference(run);
}

TEST_P(ValueDimAndSink, BackwardMatchesReference) {
    Case c = GetParam();
    c.with_lse = true;
    AttentionRun run(c);
    FA_RUN_OK(run.forward(), run);
    FA_RUN_OK(run.backward(), run);
    expect_backward_matches_reference(run);
}

INSTANTIATE_TEST_SUITE_P(Cpu, ValueDimAndSink, ::testing::ValuesIn(value_dim_and_sink_cases(Backend::cpu)), param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, ValueDimAndSink, ::testing::ValuesIn(value_dim_and_sink_cases(Backend::cuda)), param_name);

class VarlenValueDimAndSink : public ValueDimAndSink {};

TEST_P(VarlenValueDimAndSink, ForwardAndBackwardMatchReference) {
    Case c = GetParam();
    AttentionRun run(c);
    FA_RUN_OK(run.forward(), run);
    expect_forward_matches_reference(run);
    FA_RUN_OK(run.backward(), run);
    expect_backward_matches_reference(run);
}

INSTANTIATE_TEST_SUITE_P(Cpu, VarlenValueDimAndSink,
                         ::testing::ValuesIn(varlen_value_dim_and_sink_cases(Backend::cpu)), param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, VarlenValueDimAndSink,
                         ::testing::ValuesIn(varlen_value_dim_and_sink_cases(Backend::cuda)), param_name);

// The CPU backend's results, dsink included, are bitwise identical on any number of threads (the
// sink's sum runs over query blocks in a fixed order), with or without split-KV.
TEST(CpuValueDimAndSink, ResultsDoNotDependOnThreadCount) {
    for (int splits : {1, 3}) {
        Case c = dense(FA_BFLOAT16, 3, 70, 300, 6, 2, 96, 64, true, [splits](Case& c) {
            c.causal = true; c.dropout_p = 0.1f; c.num_splits = splits; });
        std::vector<unsigned char> first_out;
        std::vector<float> first_lse, first_dsink;
        std::vector<double> first_dq, first_dv;
        for (int threads : {1, 2, 3, 8}) {
            fa_set_num_threads(threads);
            AttentionRun run(c);
            const fa_status fwd = run.forward();
            const fa_status bwd = fwd == FA_OK ? run.backward() : fwd;
            fa_set_num_threads(0);
            ASSERT_EQ(bwd, FA_OK) << run.last_error();
            const auto* out = static_cast<const unsigned char*>(run.out.data());
            if (first_out.empty()) {
                first_out.assign(out, out + run.out.bytes());
                first_lse = run.lse;
                first_dsink = run.dsink;
                first_dq = run.dq.canonical();
                first_dv = run.dv.canonical();
                expect_forward_matches_reference(run);
                expect_backward_matches_reference(run);
                continue;
            }
            SCOPED_TRACE(std::to_string(threads) + " threads, num_splits " + std::to_string(splits));
            EXPECT_EQ(std::memcmp(first_out.data(), out, first_out.size()), 0);
            EXPECT_EQ(std::memcmp(first_lse.data(), run.lse.data(), first_lse.size() * sizeof(float)), 0);
            EXPECT_EQ(std::memcmp(first_dsink.data(), run.dsink.data(), first_dsink.size() * sizeof(float)), 0);
            EXPECT_EQ(first_dq, run.dq.canonical());
            EXPECT_EQ(first_dv, run.dv.canonical());
        }
    }
}

// Deterministic mode on CUDA: dsink is a fixed-order sum (per-CTA terms, then an ordered sum), so it
// is bitwise identical across runs, with dq, dk and dv; split-KV forwards are reproducible too.
TEST(CudaValueDimAndSink, DeterministicBackwardIsBitwiseReproducible) {
    FA_SKIP_IF_UNAVAILABLE(Backend::cuda);
    for (int head_dim_v : {128, 64}) {
        Case c = dense(FA_BFLOAT16, 3, 300, 420, 8, 2, 128, head_dim_v, true, [](Case& c) {
            c.causal = true; c.deterministic = true; c.with_lse = true; });
        c.backend = Backend::cuda;
        c.name = "deterministic_dv" + std::to_string(head_dim_v);
        c.seed = seed_from(c.name);
        std::vector<float> first_dsink;
        std::vector<double> first_dq, first_dk, first_dv;
        for (int run_index = 0; run_index < 3; ++run_index) {
            AttentionRun run(c);
            ASSERT_EQ(run.forward(), FA_OK) << run.last_error();
            ASSERT_EQ(run.backward(), FA_OK) << run.last_error();
            if (run_index == 0) {
                expect_backward_matches_reference(run);
                first_dsink = run.dsink;
                first_dq = run.dq.canonical();
                first_dk = run.dk.canonical();
                first_dv = run.dv.canonical();
                continue;
            }
            SCOPED_TRACE("head_dim_v " + std::to_string(head_dim_v) + ", run " + std::to_string(run_index));
            EXPECT_EQ(std::memcmp(first_dsink.data(), run.dsink.data(), first_dsink.size() * sizeof(float)), 0);
            EXPECT_EQ(first_dq, run.dq.canonical());
            EXPECT_EQ(first_dk, run.dk.canonical());
            EXPECT_EQ(first_dv, run.dv.canonical());
        }
    }
}

// A backward without dsink computes the other gradients all the same (dsink is optional).
TEST(CpuValueDimAndSink, DsinkIsOptional) {
    const Case c = dense(FA_FLOAT16, 2, 50, 70, 2, 2, 64, 32, true, [](Case& c) { c.causal = true; });
    AttentionRun with(c), without(c);
    ASSERT_EQ(with.forward(), FA_OK) << with.last_error();
    ASSERT_EQ(with.backward(), FA_OK) << with.last_error();
    ASSERT_EQ(without.forward(), FA_OK) << without.last_error();
    fa_bwd_params p = without.bwd_params();
    p.dsink = nullptr;
    ASSERT_EQ(fa_backward(&p), FA_OK) << fa_last_error();
    EXPECT_EQ(with.dq.canonical(), without.dq.canonical());
    EXPECT_EQ(with.dk.canonical(), without.dk.canonical());
    EXPECT_EQ(with.dv.canonical(), without.dv.canonical());
}

} // namespace
} // namespace flashattn::testing
