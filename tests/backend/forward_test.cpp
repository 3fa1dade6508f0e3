// Forward through the C ABI against the fp64 reference, for every case of cases.cpp on every backend:
// out (and lse, attn_probs) within FlashAttention's tolerance rule, every output element written,
// no byte written outside the views.
#include "cases.h"

namespace flashattn::testing {
namespace {

TEST_P(Attention, ForwardMatchesReference) {
    AttentionRun run(GetParam());
    ASSERT_EQ(run.forward(), FA_OK) << describe(GetParam()) << ": " << run.last_error();
    expect_forward_matches_reference(run);
}

TEST_P(Attention, ForwardAttnProbsMatchReference) {
    Case c = GetParam();
    // attn_probs is O(N^2): only on the smaller cases.
    if (int64_t(c.batch) * c.heads * c.seqlen_q * c.seqlen_k > (1 << 20)) GTEST_SKIP() << "attn_probs: case too large";
    c.want_probs = true;
    AttentionRun run(c);
    ASSERT_EQ(run.forward(), FA_OK) << describe(c) << ": " << run.last_error();
    expect_forward_matches_reference(run);
}

} // namespace

INSTANTIATE_TEST_SUITE_P(Cpu, Attention, ::testing::ValuesIn(attention_cases(Backend::cpu)), param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, Attention, ::testing::ValuesIn(attention_cases(Backend::cuda)), param_name);

} // namespace flashattn::testing
