// The CPU forward's paths for few query rows (docs/cpu-backend.md, "Decode"): the query heads of a
// KV head packed into one tile (each row keeping its own head and position for masks, ALiBi,
// dropout, softcap), K/V converted block by block inside the task, split-KV with its merge. Every
// case is checked against the fp64 reference; the thread count must not change a single bit.
#include "cases.h"

#include <cstring>

namespace flashattn::testing {
namespace {

Case decode_case(int seqlen_q, int seqlen_k, int heads, int heads_k) {
    Case c;
    c.dtype = FA_BFLOAT16;
    c.batch = 2;
    c.seqlen_q = seqlen_q;
    c.seqlen_k = seqlen_k;
    c.heads = heads;
    c.heads_k = heads_k;
    c.head_dim = 64;
    return c;
}

void run_and_check(Case c, bool backward_too = false) {
    c.seed = seed_from(describe(c));
    SCOPED_TRACE(describe(c));
    AttentionRun run(c);
    ASSERT_EQ(run.forward(), FA_OK) << run.last_error();
    expect_forward_matches_reference(run);
    if (backward_too) { // the backward recomputes P from the lse the packed forward wrote
        ASSERT_EQ(run.backward(), FA_OK) << run.last_error();
        expect_backward_matches_reference(run);
    }
}

// Packed tiles mix heads and query rows; every per-row feature must follow its row.
TEST(CpuDecodePacking, MasksAlibiDropoutSoftcapFollowEachRow) {
    { // decode, GQA 4: causal, per-head ALiBi, dropout (attn_probs checks every dropped element)
        Case c = decode_case(1, 300, 8, 2);
        c.causal = true;
        c.alibi = Alibi::per_head;
        c.dropout_p = 0.2f;
        c.want_probs = true;
        run_and_check(c, true);
    }
    { // a few rows per head: local window whose edge cuts through the tile, ALiBi per (batch, head), softcap
        Case c = decode_case(5, 260, 12, 3);
        c.window_left = 37;
        c.window_right = 2;
        c.alibi = Alibi::per_batch_and_head;
        c.softcap = 20.0f;
        c.dtype = FA_FLOAT16;
        run_and_check(c, true);
    }
    { // MQA, 6 heads x 7 rows in one tile, causal (rows of one position share a mask), dropout, probs
        Case c = decode_case(7, 150, 6, 1);
        c.causal = true;
        c.dropout_p = 0.1f;
        c.want_probs = true;
        c.head_dim = 59; // not a whole number of vectors
        run_and_check(c, true);
    }
    { // packed rows spill over several tiles (K/V packed up front, not per block), causal, ALiBi, dropout
        Case c = decode_case(40, 333, 8, 2);
        c.causal = true;
        c.alibi = Alibi::per_head;
        c.dropout_p = 0.15f;
        run_and_check(c);
    }
    { // fp32 (batch, heads, seqlen, dim): K/V read in place; a window that leaves some rows no key
        Case c = decode_case(3, 200, 8, 4);
        c.dtype = FA_FLOAT32;
        c.layout = Layout::bhsd;
        c.window_left = 0;
        c.window_right = 0;
        c.seqused_k = {200, 0};
        run_and_check(c);
    }
    { // tasks of several KV heads' tiles, the last group smaller (with today's heuristic: 10 splits,
      // 3 heads per task), ALiBi per (batch, head), dropout
        Case c = decode_case(1, 1900, 24, 8);
        c.batch = 3;
        c.num_splits = 0;
        c.causal = true;
        c.alibi = Alibi::per_batch_and_head;
        c.dropout_p = 0.1f;
        run_and_check(c);
    }
    { // many sequences: every KV head of a sequence in one task, no split; probabilities too
        Case c = decode_case(2, 100, 8, 4);
        c.batch = 70;
        c.head_dim = 32;
        c.causal = true;
        c.alibi = Alibi::per_head;
        c.dropout_p = 0.25f;
        c.want_probs = true;
        run_and_check(c, true);
    }
    { // varlen: sequences of 0..9 query rows, GQA 2, causal, ALiBi, dropout
        Case c = decode_case(9, 300, 8, 4);
        c.varlen = true;
        c.q_lens = {1, 3, 0, 9};
        c.k_lens = {50, 7, 20, 300};
        c.causal = true;
        c.alibi = Alibi::per_head;
        c.dropout_p = 0.1f;
        run_and_check(c, true);
    }
}

// Split-KV on the CPU: any num_splits, heuristic (0) or asked for, gives the reference answer,
// including splits that see no key (short sequences, windows) and rows no split sees.
TEST(CpuDecodeSplits, EveryNumSplitsGivesTheReferenceAnswer) {
    for (int num_splits : {0, 1, 2, 5, 16, 1000}) {
        SCOPED_TRACE("num_splits " + std::to_string(num_splits));
        {
            Case c = decode_case(1, 1500, 16, 4);
            c.num_splits = num_splits;
            c.seqused_k = {1500, 97};
            run_and_check(c);
        }
        {
            Case c = decode_case(4, 900, 8, 2);
            c.num_splits = num_splits;
            c.causal = true;
            c.alibi = Alibi::per_head;
            c.dropout_p = 0.1f;
            c.softcap = 30.0f;
            c.seqused_k = {0, 900};
            run_and_check(c);
        }
        {
            Case c = decode_case(2, 1000, 4, 4);
            c.num_splits = num_splits;
            c.window_left = 100; // most splits see none of these keys
            c.window_right = 0;
            c.dtype = FA_FLOAT32;
            run_and_check(c);
        }
    }
}

// Each output element's sums depend on the shape only (the heuristic's split count too): 1, 2, 3
// or 8 threads give the same bits, with and without splits, packed or not.
TEST(CpuDecodeSplits, ResultDoesNotDependOnThreadCount) {
    std::vector<Case> cases;
    {
        Case c = decode_case(1, 2000, 32, 8); // heuristic splits at batch 1
        c.batch = 1;
        c.head_dim = 128;
        c.num_splits = 0;
        cases.push_back(c);
    }
    {
        Case c = decode_case(3, 700, 8, 2);
        c.num_splits = 6;
        c.causal = true;
        c.dropout_p = 0.1f;
        c.alibi = Alibi::per_head;
        cases.push_back(c);
    }
    {
        Case c = decode_case(20, 500, 4, 2); // several packed tiles, no split
        cases.push_back(c);
    }
    for (Case& c : cases) {
        SCOPED_TRACE(describe(c));
        c.seed = seed_from(describe(c));
        std::vector<unsigned char> first_out;
        std::vector<float> first_lse;
        for (int threads : {1, 2, 3, 8}) {
            fa_set_num_threads(threads);
            AttentionRun run(c);
            const fa_status status = run.forward();
            fa_set_num_threads(0);
            ASSERT_EQ(status, FA_OK) << threads << " threads: " << run.last_error();
            const auto* out = static_cast<const unsigned char*>(run.out.data());
            if (first_out.empty()) {
                expect_forward_matches_reference(run);
                first_out.assign(out, out + run.out.bytes());
                first_lse = run.lse;
                continue;
            }
            EXPECT_EQ(std::memcmp(first_out.data(), out, first_out.size()), 0) << threads << " threads: out differs";
            EXPECT_EQ(std::memcmp(first_lse.data(), run.lse.data(), first_lse.size() * sizeof(float)), 0)
                << threads << " threads: softmax_lse differs";
        }
    }
}

} // namespace
} // namespace flashattn::testing
