// fa_varlen_forward / fa_varlen_backward against the reference: packed sequences including empty
// ones (no queries, or no keys), seqused_k, spare rows past the last sequence, every feature.
// Rows that belong to no sequence are unspecified and not compared.
#include "cases.h"

namespace flashattn::testing {
namespace {

TEST_P(VarlenAttention, ForwardMatchesReference) {
    AttentionRun run(GetParam());
    ASSERT_EQ(run.forward(), FA_OK) << describe(GetParam()) << ": " << run.last_error();
    expect_forward_matches_reference(run);
}

// flash_attn's padded S_dmask: (batch, heads, max_seqlen_q, max_seqlen_k), 0 past each sequence.
TEST_P(VarlenAttention, ForwardAttnProbsMatchReference) {
    Case c = GetParam();
    if (int64_t(c.batch) * c.heads * c.seqlen_q * c.seqlen_k > (1 << 20)) GTEST_SKIP() << "attn_probs: case too large";
    c.want_probs = true;
    AttentionRun run(c);
    ASSERT_EQ(run.forward(), FA_OK) << describe(c) << ": " << run.last_error();
    expect_forward_matches_reference(run);
}

TEST_P(VarlenAttention, BackwardMatchesReference) {
    AttentionRun run(GetParam());
    ASSERT_EQ(run.forward(), FA_OK) << describe(GetParam()) << ": " << run.last_error();
    const fa_status status = run.backward();
    ASSERT_EQ(status, FA_OK) << describe(GetParam()) << ": " << run.last_error();
    expect_backward_matches_reference(run);
}

} // namespace

INSTANTIATE_TEST_SUITE_P(Cpu, VarlenAttention, ::testing::ValuesIn(varlen_cases(Backend::cpu)), param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, VarlenAttention, ::testing::ValuesIn(varlen_cases(Backend::cuda)), param_name);

} // namespace flashattn::testing
