// Backward through the C ABI against the reference's analytic gradients: dq, dk, dv (summed over
// each KV head's query heads) within 3x the naive same-precision error, every element written. The
// backward runs on the backend's own out and softmax_lse, as a caller would.
#include "cases.h"

namespace flashattn::testing {
namespace {

TEST_P(Attention, BackwardMatchesReference) {
    Case c = GetParam();
    c.with_lse = true; // the backward needs the forward's logsumexp
    AttentionRun run(c);
    ASSERT_EQ(run.forward(), FA_OK) << describe(c) << ": " << run.last_error();
    const fa_status status = run.backward();
    ASSERT_EQ(status, FA_OK) << describe(c) << ": " << run.last_error();
    expect_backward_matches_reference(run);
}

} // namespace
} // namespace flashattn::testing
