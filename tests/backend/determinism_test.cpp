// Reproducibility and the knobs that must not change the answer: a deterministic backward is
// bitwise identical over repeated runs, the forward always is; num_splits, thread counts and the
// AUTO backend choice give correct results.
#include "cases.h"

#include <cstring>
#include <memory>
#include <thread>

namespace flashattn::testing {
namespace {

class Reproducibility : public ::testing::TestWithParam<Backend> {
protected:
    void SetUp() override { FA_SKIP_IF_UNAVAILABLE(GetParam()); }

    std::vector<Case> problems() const {
        Case gqa;
        gqa.backend = GetParam();
        gqa.dtype = FA_FLOAT16;
        gqa.batch = 2;
        gqa.seqlen_q = 113;
        gqa.seqlen_k = 203;
        gqa.heads = 6;
        gqa.heads_k = 2;
        gqa.head_dim = 64;
        gqa.causal = true;
        gqa.dropout_p = 0.1f;
        Case varlen = gqa;
        varlen.dtype = FA_BFLOAT16;
        varlen.varlen = true;
        varlen.q_lens = {77, 0, 150, 3};
        varlen.k_lens = {90, 20, 140, 64};
        varlen.alibi = Alibi::per_head;
        // Without dropout or ALiBi: on the H200 these run the Hopper kernel's ordered dQ (d128 from
        // 512 queries; d64 always), over ragged causal ranges and a window over varlen sequences
        // with an empty one.
        Case ordered = gqa;
        ordered.dtype = FA_BFLOAT16;
        ordered.seqlen_q = 600;
        ordered.seqlen_k = 700;
        ordered.head_dim = 128;
        ordered.dropout_p = 0.0f;
        Case ordered_varlen = ordered;
        ordered_varlen.head_dim = 64;
        ordered_varlen.causal = false;
        ordered_varlen.window_left = 90, ordered_varlen.window_right = 20;
        ordered_varlen.varlen = true;
        ordered_varlen.q_lens = {300, 0, 129, 64};
        ordered_varlen.k_lens = {250, 40, 300, 0};
        return {gqa, varlen, ordered, ordered_varlen};
    }
};

bool same_bytes(const Tensor& a, const Tensor& b) { return std::memcmp(a.data(), b.data(), a.bytes()) == 0; }

TEST_P(Reproducibility, DeterministicBackwardIsBitwiseIdenticalAcrossRuns) {
    for (const Case& c : problems()) {
        AttentionRun first(c);
        ASSERT_EQ(first.forward(), FA_OK) << first.last_error();
        const fa_status status = first.backward();
        ASSERT_EQ(status, FA_OK) << first.last_error();
        for (int repeat = 0; repeat < 3; ++repeat) {
            AttentionRun again(c);
            ASSERT_EQ(again.forward(), FA_OK);
            ASSERT_EQ(again.backward(), FA_OK);
            EXPECT_TRUE(same_bytes(first.dq, again.dq)) << describe(c) << ": dq differs on repeat " << repeat;
            EXPECT_TRUE(same_bytes(first.dk, again.dk)) << describe(c) << ": dk differs on repeat " << repeat;
            EXPECT_TRUE(same_bytes(first.dv, again.dv)) << describe(c) << ": dv differs on repeat " << repeat;
        }
    }
}

TEST_P(Reproducibility, ForwardIsBitwiseIdenticalAcrossRuns) {
    for (const Case& c : problems()) {
        AttentionRun first(c), again(c);
        ASSERT_EQ(first.forward(), FA_OK) << first.last_error();
        ASSERT_EQ(again.forward(), FA_OK);
        EXPECT_TRUE(same_bytes(first.out, again.out)) << describe(c);
        EXPECT_EQ(std::memcmp(first.lse.data(), again.lse.data(), first.lse.size() * sizeof(float)), 0) << describe(c);
    }
}

TEST_P(Reproducibility, NonDeterministicBackwardMatchesReference) {
    for (Case c : problems()) {
        c.deterministic = false;
        AttentionRun run(c);
        ASSERT_EQ(run.forward(), FA_OK) << run.last_error();
        const fa_status status = run.backward();
        ASSERT_EQ(status, FA_OK) << run.last_error();
        expect_backward_matches_reference(run);
    }
}

TEST_P(Reproducibility, EveryNumSplitsGivesTheReferenceAnswer) {
    // Long keys and few query rows are where a split-KV forward pays off.
    for (int num_splits : {0, 1, 2, 3, 8}) {
        for (auto [sq, causal] : {std::pair{1, false}, {16, true}}) {
            Case c;
            c.backend = GetParam();
            c.dtype = FA_FLOAT16;
            c.batch = 2;
            c.heads = 4;
            c.heads_k = 1;
            c.seqlen_q = sq;
            c.seqlen_k = 1000;
            c.head_dim = 128;
            c.causal = causal;
            c.seqused_k = {1000, 333};
            c.num_splits = num_splits;
            c.seed = uint64_t(num_splits * 10 + sq);
            AttentionRun run(c);
            ASSERT_EQ(run.forward(), FA_OK) << "num_splits " << num_splits << ": " << run.last_error();
            SCOPED_TRACE("num_splits " + std::to_string(num_splits) + ", seqlen_q " + std::to_string(sq));
            expect_forward_matches_reference(run);
        }
    }
}

TEST_P(Reproducibility, ConcurrentCallsFromSeveralThreadsGiveTheReferenceAnswer) {
    // Frameworks call from several threads at once; the calls share the library's thread pool
    // (CPU) or device (CUDA) and must neither race nor deadlock.
    std::vector<std::unique_ptr<AttentionRun>> runs;
    for (int t = 0; t < 4; ++t) {
        Case c;
        c.backend = GetParam();
        c.dtype = t % 2 ? FA_FLOAT16 : FA_BFLOAT16;
        c.seqlen_q = 100 + 13 * t;
        c.seqlen_k = 150 - 7 * t;
        c.heads = 2 + t;
        c.heads_k = t % 2 ? 1 : c.heads;
        c.causal = t % 2 == 1;
        c.seed = uint64_t(t);
        runs.push_back(std::make_unique<AttentionRun>(c));
    }
    std::vector<fa_status> forward(runs.size()), backward(runs.size());
    std::vector<std::thread> threads;
    for (size_t t = 0; t < runs.size(); ++t)
        threads.emplace_back([&, t] {
            for (int repeat = 0; repeat < 3; ++repeat) {
                forward[t] = runs[t]->forward();
                backward[t] = forward[t] == FA_OK ? runs[t]->backward() : forward[t];
            }
        });
    for (std::thread& thread : threads) thread.join();
    for (size_t t = 0; t < runs.size(); ++t) {
        SCOPED_TRACE(describe(runs[t]->c()));
        ASSERT_EQ(forward[t], FA_OK) << runs[t]->last_error();
        expect_forward_matches_reference(*runs[t]);
        ASSERT_EQ(backward[t], FA_OK) << runs[t]->last_error();
        expect_backward_matches_reference(*runs[t]);
    }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Reproducibility, ::testing::Values(Backend::cpu), [](const auto&) { return "cpu"; });
INSTANTIATE_TEST_SUITE_P(Cuda, Reproducibility, ::testing::Values(Backend::cuda), [](const auto&) { return "cuda"; });

// CPU only: the thread count changes the schedule, never the answer's accuracy.
TEST(CpuThreads, EveryThreadCountGivesTheReferenceAnswer) {
    Case c;
    c.dtype = FA_BFLOAT16;
    c.batch = 3;
    c.seqlen_q = 150;
    c.seqlen_k = 170;
    c.heads = 5;
    c.heads_k = 5;
    c.head_dim = 64;
    c.causal = true;
    for (int threads : {1, 2, 3, 7}) {
        fa_set_num_threads(threads);
        AttentionRun run(c);
        const fa_status fwd = run.forward();
        const fa_status bwd = fwd == FA_OK ? run.backward() : fwd;
        fa_set_num_threads(0);
        ASSERT_EQ(fwd, FA_OK) << threads << " threads: " << run.last_error();
        ASSERT_EQ(bwd, FA_OK) << threads << " threads: " << run.last_error();
        SCOPED_TRACE(std::to_string(threads) + " threads");
        expect_forward_matches_reference(run);
        expect_backward_matches_reference(run);
    }
}

TEST(CpuBackendChoice, AutoOnHostMemoryGivesTheCpuResult) {
    Case c;
    c.dtype = FA_FLOAT16;
    c.seqlen_q = 50;
    c.seqlen_k = 70;
    c.causal = true;
    AttentionRun cpu(c);
    ASSERT_EQ(cpu.forward(), FA_OK) << cpu.last_error();
    AttentionRun automatic(c);
    fa_fwd_params p = automatic.fwd_params();
    p.backend = FA_BACKEND_AUTO;
    automatic.out.poison();
    ASSERT_EQ(fa_forward(&p), FA_OK) << fa_last_error();
    EXPECT_TRUE(same_bytes(cpu.out, automatic.out));
}

// fp32 is a CPU-only dtype: the CUDA backend must refuse it clearly, not compute garbage.
TEST(CudaBackend, RejectsFloat32AsUnsupported) {
    FA_SKIP_IF_UNAVAILABLE(Backend::cuda);
    Case c;
    c.backend = Backend::cuda;
    c.dtype = FA_FLOAT32;
    AttentionRun run(c);
    EXPECT_EQ(run.forward(), FA_ERROR_UNSUPPORTED) << run.last_error();
    EXPECT_NE(run.last_error().find("float32"), std::string::npos) << run.last_error();
}

} // namespace
} // namespace flashattn::testing
