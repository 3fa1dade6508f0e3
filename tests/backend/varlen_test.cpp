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
