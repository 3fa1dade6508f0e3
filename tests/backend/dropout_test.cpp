// Dropout on a backend: the fraction dropped is p (within 0.01), the mask is exactly the Philox mask
// of include/flashattn/philox.h (the reference's, read from the sign of attn_probs), and the
// generator state (rng_seed, rng_offset) selects it.
#include "cases.h"

#include <cstring>
#include <tuple>

namespace flashattn::testing {
namespace {

class Dropout : public ::testing::TestWithParam<Backend> {
protected:
    void SetUp() override { FA_SKIP_IF_UNAVAILABLE(GetParam()); }

    Case problem(fa_dtype dtype, int sq, int sk, float p) const {
        Case c;
        c.backend = GetParam();
        c.dtype = dtype;
        c.batch = 2;
        c.heads = 4;
        c.heads_k = 2;
        c.seqlen_q = sq;
        c.seqlen_k = sk;
        c.head_dim = 32;
        c.dropout_p = p;
        c.want_probs = true;
        c.rng_seed = 0x9e3779b97f4a7c15ull;
        c.rng_offset = (3ull << 32) | 977u;
        return c;
    }
};

TEST_P(Dropout, DroppedFractionIsWithinOnePercentOfP) {
    for (float p : {0.1f, 0.17f, 0.5f}) {
        AttentionRun run(problem(FA_FLOAT16, 256, 256, p));
        ASSERT_EQ(run.forward(), FA_OK) << run.last_error();
        int64_t dropped = 0;
        for (float x : run.probs) dropped += std::signbit(x);
        const double fraction = double(dropped) / double(run.probs.size());
        EXPECT_NEAR(fraction, p, 0.01) << "p = " << p;
    }
}

TEST_P(Dropout, MaskEqualsTheReferenceMask) {
    for (bool causal : {false, true}) {
        Case c = problem(FA_BFLOAT16, 113, 203, 0.3f);
        c.causal = causal;
        c.window_left = causal ? 40 : -1;
        AttentionRun run(c);
        ASSERT_EQ(run.forward(), FA_OK) << run.last_error();
        const Problem pr = run.problem();
        const auto ref = reference::forward(pr, reference::Precision::fp64, true);
        int64_t mismatches = 0, first = -1;
        for (int64_t b = 0; b < c.batch; ++b)
            for (int64_t h = 0; h < c.heads; ++h)
                for (int64_t i = 0; i < c.seqlen_q; ++i)
                    for (int64_t j = 0; j < c.seqlen_k; ++j) {
                        const size_t at = size_t(((b * c.heads + h) * c.seqlen_q + i) * c.seqlen_k + j);
                        const bool allowed = pr.mask.allowed(i, j, c.seqlen_q, c.seqlen_k);
                        const bool wrong = allowed ? std::signbit(run.probs[at]) != std::signbit(ref.probs[at])
                                                   : run.probs[at] != 0.0f;
                        if (wrong && mismatches++ == 0) first = int64_t(at);
                    }
        EXPECT_EQ(mismatches, 0) << (causal ? "causal: " : "") << "first mismatch at flat index " << first
                                 << " (b, h, i, j row-major): ours " << run.probs[size_t(std::max<int64_t>(first, 0))]
                                 << ", reference " << ref.probs[size_t(std::max<int64_t>(first, 0))];
        expect_forward_matches_reference(run);
    }
}

TEST_P(Dropout, SeedAndOffsetSelectTheMask) {
    Case c = problem(FA_FLOAT16, 64, 96, 0.25f);
    c.want_probs = false;
    AttentionRun base(c);
    ASSERT_EQ(base.forward(), FA_OK) << base.last_error();
    AttentionRun same(c);
    ASSERT_EQ(same.forward(), FA_OK);
    EXPECT_EQ(std::memcmp(base.out.data(), same.out.data(), base.out.bytes()), 0) << "same seed, different output";
    for (auto [seed, offset] : {std::pair{c.rng_seed + 1, c.rng_offset}, {c.rng_seed, c.rng_offset + 1},
                                {c.rng_seed, c.rng_offset + (1ull << 32)}}) {
        Case other = c;
        other.rng_seed = seed;
        other.rng_offset = offset;
        AttentionRun run(other);
        ASSERT_EQ(run.forward(), FA_OK);
        EXPECT_NE(std::memcmp(base.out.data(), run.out.data(), base.out.bytes()), 0)
            << "seed " << seed << " offset " << offset << " gave the same output";
        expect_forward_matches_reference(run);
    }
}

// rng_state: the pair read from memory (host for the CPU backend, device for CUDA) drops exactly what
// the same pair by value drops, in the forward, attn_probs and the backward. The by-value fields of
// the in-memory run hold other numbers, which must be ignored.
TEST_P(Dropout, RngStateInMemoryEqualsTheSameSeedAndOffsetByValue) {
    for (bool causal : {false, true}) {
        Case c = problem(FA_BFLOAT16, 77, 130, 0.3f);
        c.causal = causal;
        c.with_lse = true;
        AttentionRun by_value(c);
        ASSERT_EQ(by_value.forward(), FA_OK) << by_value.last_error();
        ASSERT_EQ(by_value.backward(), FA_OK) << by_value.last_error();
        c.rng_in_memory = true;
        AttentionRun in_memory(c);
        ASSERT_EQ(in_memory.forward(), FA_OK) << in_memory.last_error();
        ASSERT_EQ(in_memory.backward(), FA_OK) << in_memory.last_error();
        EXPECT_TRUE(in_memory.input_damage().empty()) << in_memory.input_damage();
        EXPECT_EQ(std::memcmp(by_value.out.data(), in_memory.out.data(), by_value.out.bytes()), 0) << "out";
        EXPECT_EQ(std::memcmp(by_value.probs.data(), in_memory.probs.data(), by_value.probs.size() * sizeof(float)), 0)
            << "attn_probs";
        for (auto [name, a, b] : {std::tuple{"dq", &by_value.dq, &in_memory.dq}, {"dk", &by_value.dk, &in_memory.dk},
                                  {"dv", &by_value.dv, &in_memory.dv}})
            EXPECT_EQ(std::memcmp(a->data(), b->data(), a->bytes()), 0) << name << (causal ? " (causal)" : "");
        expect_forward_matches_reference(in_memory);
        expect_backward_matches_reference(in_memory);
    }
}

INSTANTIATE_TEST_SUITE_P(Cpu, Dropout, ::testing::Values(Backend::cpu), [](const auto&) { return "cpu"; });
INSTANTIATE_TEST_SUITE_P(Cuda, Dropout, ::testing::Values(Backend::cuda), [](const auto&) { return "cuda"; });

} // namespace
} // namespace flashattn::testing
