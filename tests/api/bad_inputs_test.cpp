// Every argument of fa_fwd_params / fa_bwd_params that can be wrong: the call must return the right
// status and fa_last_error() must name the argument. Each case starts from a valid problem and breaks
// exactly one thing, so the message can only come from that check.
#include "support/test_support.h"

#include <cmath>
#include <cstring>
#include <algorithm>
#include <functional>
#include <random>
#include <limits>

namespace flashattn::testing {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Case valid_dense() {
    Case c;
    c.dtype = FA_FLOAT16;
    c.batch = 2;
    c.seqlen_q = 8;
    c.seqlen_k = 8;
    c.heads = 4;
    c.heads_k = 2;
    c.head_dim = 16;
    c.seqused_k = {8, 5};
    return c;
}

Case valid_varlen() {
    Case c = valid_dense();
    c.varlen = true;
    c.q_lens = {3, 4};
    c.k_lens = {5, 2};
    c.seqused_k = {5, 1};
    return c;
}

struct FwdBreak {
    std::string name;
    bool varlen;
    std::function<void(fa_fwd_params&, AttentionRun&)> mutate;
    fa_status expected;
    std::string mentions; // the argument the message must name
};

std::string strip(const std::string& s) { return sanitize_name(s); }

template <typename Enum>
void store_int(Enum& field, int32_t value) {
    static_assert(sizeof(Enum) == sizeof(int32_t));
    std::memcpy(&field, &value, sizeof value);
}

std::vector<FwdBreak> forward_breaks() {
    std::vector<FwdBreak> list;
    auto add = [&](std::string name, bool varlen, std::function<void(fa_fwd_params&, AttentionRun&)> mutate,
                   std::string mentions, fa_status expected = FA_ERROR_INVALID_ARGUMENT) {
        list.push_back({std::move(name), varlen, std::move(mutate), expected, std::move(mentions)});
    };
    using P = fa_fwd_params;
    add("struct_size_not_initialised", false, [](P& p, AttentionRun&) { p.struct_size = 12; }, "struct_size");
    // A C caller can store any int in an enum field (creating such a value in C++ is undefined).
    add("dtype_unknown", false, [](P& p, AttentionRun&) { store_int(p.dtype, 7); }, "dtype");
    add("dtype_negative", false, [](P& p, AttentionRun&) { store_int(p.dtype, -1); }, "dtype");
    add("backend_unknown", false, [](P& p, AttentionRun&) { store_int(p.backend, 9); }, "backend");
    add("batch_zero", false, [](P& p, AttentionRun&) { p.batch = 0; }, "batch");
    add("batch_negative", false, [](P& p, AttentionRun&) { p.batch = -3; }, "batch");
    add("seqlen_q_negative", false, [](P& p, AttentionRun&) { p.seqlen_q = -1; }, "seqlen_q");
    add("seqlen_k_negative", false, [](P& p, AttentionRun&) { p.seqlen_k = -1; }, "seqlen_k");
    add("num_heads_zero", false, [](P& p, AttentionRun&) { p.num_heads = 0; }, "num_heads");
    add("num_heads_k_zero", false, [](P& p, AttentionRun&) { p.num_heads_k = 0; }, "num_heads_k");
    add("num_heads_not_multiple_of_num_heads_k", false, [](P& p, AttentionRun&) { p.num_heads_k = 3; }, "num_heads_k");
    add("head_dim_zero", false, [](P& p, AttentionRun&) { p.head_dim = 0; }, "head_dim");
    add("head_dim_above_256", false, [](P& p, AttentionRun&) { p.head_dim = 257; }, "head_dim");
    add("head_dim_v_negative", false, [](P& p, AttentionRun&) { p.head_dim_v = -1; }, "head_dim_v");
    add("head_dim_v_above_256", false, [](P& p, AttentionRun&) { p.head_dim_v = 257; }, "head_dim_v");
    // out's heads are 16 apart: 32 value columns would make them overlap.
    add("out_heads_overlap_head_dim_v", false, [](P& p, AttentionRun&) { p.head_dim_v = 32; }, "out");
    add("learnable_sink_not_finite", false,
        [](P& p, AttentionRun& r) {
            r.sink.assign(4, 0.5f);
            r.sink[2] = kInf;
            p.learnable_sink = r.sink.data();
        },
        "learnable_sink[2]");
    add("learnable_sink_nan_varlen", true,
        [](P& p, AttentionRun& r) {
            r.sink.assign(4, kNaN);
            p.learnable_sink = r.sink.data();
        },
        "learnable_sink[0]");
    add("dense_call_with_cu_seqlens_q", false, [](P& p, AttentionRun& r) { p.cu_seqlens_q = r.seqused_k.data(); }, "cu_seqlens_q");
    add("dense_call_with_cu_seqlens_k", false, [](P& p, AttentionRun& r) { p.cu_seqlens_k = r.seqused_k.data(); }, "cu_seqlens_k");

    // Every tensor: NULL data, negative strides; every output: aliasing elements.
    struct Named {
        const char* name;
        fa_tensor P::*member;
    };
    for (Named t : {Named{"q", &P::q}, Named{"k", &P::k}, Named{"v", &P::v}, Named{"out", &P::out}}) {
        const std::string n = t.name;
        const auto m = t.member;
        add(n + "_data_null", false, [m](P& p, AttentionRun&) { (p.*m).data = nullptr; }, n + ".data");
        add(n + "_row_stride_negative", false, [m](P& p, AttentionRun&) { (p.*m).row_stride = -16; }, n + ".row_stride");
        add(n + "_head_stride_negative", false, [m](P& p, AttentionRun&) { (p.*m).head_stride = -1; }, n + ".head_stride");
        add(n + "_batch_stride_negative", false, [m](P& p, AttentionRun&) { (p.*m).batch_stride = -5; }, n + ".batch_stride");
        add(n + "_varlen_row_stride_negative", true, [m](P& p, AttentionRun&) { (p.*m).row_stride = -16; }, n + ".row_stride");
    }
    add("out_rows_alias", false, [](P& p, AttentionRun&) { p.out.row_stride = 0; }, "out");
    add("out_heads_overlap_head_dim", false, [](P& p, AttentionRun&) { p.out.head_stride = 8; }, "out");
    add("out_batches_alias", false, [](P& p, AttentionRun&) { p.out.batch_stride = 0; }, "out");
    add("out_varlen_rows_alias", true, [](P& p, AttentionRun&) { p.out.row_stride = 16; }, "out");

    add("softmax_scale_nan", false, [](P& p, AttentionRun&) { p.softmax_scale = kNaN; }, "softmax_scale");
    add("softmax_scale_infinite", false, [](P& p, AttentionRun&) { p.softmax_scale = kInf; }, "softmax_scale");
    add("softmax_scale_negative", false, [](P& p, AttentionRun&) { p.softmax_scale = -0.2f; }, "softmax_scale");
    add("window_left_below_minus_one", false, [](P& p, AttentionRun&) { p.window_left = -2; }, "window_left");
    add("window_right_below_minus_one", false, [](P& p, AttentionRun&) { p.window_right = -7; }, "window_right");
    add("softcap_negative", false, [](P& p, AttentionRun&) { p.softcap = -1.0f; }, "softcap");
    add("softcap_nan", false, [](P& p, AttentionRun&) { p.softcap = kNaN; }, "softcap");
    add("softcap_infinite", false, [](P& p, AttentionRun&) { p.softcap = kInf; }, "softcap");
    add("alibi_batch_stride_smaller_than_num_heads", false,
        [](P& p, AttentionRun& r) {
            r.alibi_slopes.assign(16, 0.5f);
            p.alibi_slopes = r.alibi_slopes.data();
            p.alibi_batch_stride = 2;
        },
        "alibi_batch_stride");
    add("alibi_slope_not_finite", false,
        [](P& p, AttentionRun& r) {
            r.alibi_slopes.assign(16, 0.5f);
            r.alibi_slopes[1] = std::numeric_limits<float>::quiet_NaN();
            p.alibi_slopes = r.alibi_slopes.data();
            p.alibi_batch_stride = 0;
        },
        "alibi_slopes");
    add("alibi_batch_stride_negative", false, [](P& p, AttentionRun&) { p.alibi_batch_stride = -4; }, "alibi_batch_stride");
    add("dropout_p_one", false, [](P& p, AttentionRun&) { p.dropout_p = 1.0f; }, "dropout_p");
    add("dropout_p_negative", false, [](P& p, AttentionRun&) { p.dropout_p = -0.1f; }, "dropout_p");
    add("dropout_p_nan", false, [](P& p, AttentionRun&) { p.dropout_p = kNaN; }, "dropout_p");
    add("num_splits_negative", false, [](P& p, AttentionRun&) { p.num_splits = -1; }, "num_splits");
    add("seqused_k_above_seqlen_k", false, [](P&, AttentionRun& r) { r.seqused_k[1] = 9; }, "seqused_k[1]");
    add("seqused_k_negative", false, [](P&, AttentionRun& r) { r.seqused_k[0] = -1; }, "seqused_k[0]");

    // Varlen.
    add("varlen_cu_seqlens_q_null", true, [](P& p, AttentionRun&) { p.cu_seqlens_q = nullptr; }, "cu_seqlens_q");
    add("varlen_cu_seqlens_k_null", true, [](P& p, AttentionRun&) { p.cu_seqlens_k = nullptr; }, "cu_seqlens_k");
    add("varlen_total_q_negative", true, [](P& p, AttentionRun&) { p.total_q = -1; }, "total_q");
    add("varlen_total_k_negative", true, [](P& p, AttentionRun&) { p.total_k = -1; }, "total_k");
    add("varlen_cu_seqlens_q_not_starting_at_zero", true, [](P&, AttentionRun& r) { r.cu_seqlens_q[0] = 1; }, "cu_seqlens_q[0]");
    add("varlen_cu_seqlens_k_decreasing", true, [](P&, AttentionRun& r) { r.cu_seqlens_k[2] = 3; }, "cu_seqlens_k");
    add("varlen_cu_seqlens_q_negative", true, [](P&, AttentionRun& r) { r.cu_seqlens_q[1] = -4; }, "cu_seqlens_q");
    add("varlen_cu_seqlens_k_far_past_the_tensor", true, [](P&, AttentionRun& r) { r.cu_seqlens_k[2] = 1 << 30; }, "cu_seqlens_k");
    add("varlen_seqused_k_negative", true, [](P&, AttentionRun& r) { r.seqused_k[0] = -1; }, "seqused_k[0]");
    add("varlen_sequence_longer_than_max_seqlen_q", true, [](P& p, AttentionRun&) { p.seqlen_q = 3; }, "seqlen_q");
    add("varlen_sequence_longer_than_max_seqlen_k", true, [](P& p, AttentionRun&) { p.seqlen_k = 4; }, "seqlen_k");
    add("varlen_cu_seqlens_q_beyond_total_q", true, [](P& p, AttentionRun&) { p.total_q = 6; }, "total_q");
    add("varlen_cu_seqlens_k_beyond_total_k", true, [](P& p, AttentionRun&) { p.total_k = 6; }, "total_k");
    add("varlen_seqused_k_above_sequence_length", true, [](P&, AttentionRun& r) { r.seqused_k[1] = 3; }, "seqused_k[1]");
    return list;
}

void PrintTo(const FwdBreak& b, std::ostream* os) { *os << b.name; }

class ForwardRejects : public ::testing::TestWithParam<FwdBreak> {};

TEST_P(ForwardRejects, WithStatusAndMessageNamingTheArgument) {
    const FwdBreak& b = GetParam();
    AttentionRun run(b.varlen ? valid_varlen() : valid_dense());
    fa_fwd_params p = run.fwd_params();
    b.mutate(p, run);
    const fa_status status = b.varlen ? fa_varlen_forward(&p) : fa_forward(&p);
    const std::string message = fa_last_error();
    EXPECT_EQ(status, b.expected) << fa_status_name(status) << ": " << message;
    EXPECT_NE(message.find(b.mentions), std::string::npos) << "message does not name '" << b.mentions << "': " << message;
    // The backward checks the same forward problem and must say the same.
    fa_bwd_params bp = run.bwd_params();
    bp.fwd = p;
    bp.fwd.softmax_lse = run.lse.data();
    bp.fwd.attn_probs = nullptr;
    const fa_status bwd_status = b.varlen ? fa_varlen_backward(&bp) : fa_backward(&bp);
    const std::string bwd_message = fa_last_error();
    EXPECT_EQ(bwd_status, b.expected) << "backward: " << bwd_message;
    EXPECT_NE(bwd_message.find(b.mentions), std::string::npos) << "backward message: " << bwd_message;
}

INSTANTIATE_TEST_SUITE_P(Arguments, ForwardRejects, ::testing::ValuesIn(forward_breaks()),
                         [](const auto& info) { return strip(info.param.name); });

struct BwdBreak {
    std::string name;
    bool varlen;
    std::function<void(fa_bwd_params&, AttentionRun&)> mutate;
    std::string mentions;
};

std::vector<BwdBreak> backward_breaks() {
    std::vector<BwdBreak> list;
    using P = fa_bwd_params;
    auto add = [&](std::string name, bool varlen, std::function<void(P&, AttentionRun&)> mutate, std::string mentions) {
        list.push_back({std::move(name), varlen, std::move(mutate), std::move(mentions)});
    };
    add("struct_size_not_initialised", false, [](P& p, AttentionRun&) { p.struct_size = 3; }, "struct_size");
    add("fwd_struct_size_not_initialised", false, [](P& p, AttentionRun&) { p.fwd.struct_size = 3; }, "fwd.struct_size");
    add("softmax_lse_null", false, [](P& p, AttentionRun&) { p.fwd.softmax_lse = nullptr; }, "softmax_lse");
    add("varlen_softmax_lse_null", true, [](P& p, AttentionRun&) { p.fwd.softmax_lse = nullptr; }, "softmax_lse");
    struct Named {
        const char* name;
        fa_tensor P::*member;
    };
    for (Named t : {Named{"dout", &P::dout}, Named{"dq", &P::dq}, Named{"dk", &P::dk}, Named{"dv", &P::dv}}) {
        const std::string n = t.name;
        const auto m = t.member;
        add(n + "_data_null", false, [m](P& p, AttentionRun&) { (p.*m).data = nullptr; }, n + ".data");
        add(n + "_row_stride_negative", false, [m](P& p, AttentionRun&) { (p.*m).row_stride = -1; }, n + ".row_stride");
        add(n + "_head_stride_negative", false, [m](P& p, AttentionRun&) { (p.*m).head_stride = -1; }, n + ".head_stride");
        add(n + "_batch_stride_negative", false, [m](P& p, AttentionRun&) { (p.*m).batch_stride = -1; }, n + ".batch_stride");
        add(n + "_varlen_data_null", true, [m](P& p, AttentionRun&) { (p.*m).data = nullptr; }, n + ".data");
    }
    add("dsink_without_learnable_sink", false,
        [](P& p, AttentionRun& r) {
            r.dsink.assign(4, 0.0f);
            p.dsink = r.dsink.data();
        },
        "dsink");
    add("dv_heads_overlap_head_dim_v", false,
        [](P& p, AttentionRun& r) {
            // v, out and dout as wide as head_dim_v asks; dv still 16 columns per head
            r.v = Tensor(FA_FLOAT16, 2, 8, 2, 32, Layout::bshd);
            r.out = Tensor(FA_FLOAT16, 2, 8, 4, 32, Layout::bshd);
            r.dout = Tensor(FA_FLOAT16, 2, 8, 4, 32, Layout::bshd);
            p.fwd.head_dim_v = 32;
            p.fwd.v = r.v.view();
            p.fwd.out = r.out.view();
            p.dout = r.dout.view();
        },
        "dv");
    add("dq_rows_alias", false, [](P& p, AttentionRun&) { p.dq.row_stride = 0; }, "dq");
    add("dk_heads_alias", false, [](P& p, AttentionRun&) { p.dk.head_stride = 0; }, "dk");
    add("dv_varlen_rows_overlap", true, [](P& p, AttentionRun&) { p.dv.row_stride = 3; }, "dv");
    return list;
}

void PrintTo(const BwdBreak& b, std::ostream* os) { *os << b.name; }

class BackwardRejects : public ::testing::TestWithParam<BwdBreak> {};

TEST_P(BackwardRejects, WithStatusAndMessageNamingTheArgument) {
    const BwdBreak& b = GetParam();
    AttentionRun run(b.varlen ? valid_varlen() : valid_dense());
    fa_bwd_params p = run.bwd_params();
    b.mutate(p, run);
    const fa_status status = b.varlen ? fa_varlen_backward(&p) : fa_backward(&p);
    const std::string message = fa_last_error();
    EXPECT_EQ(status, FA_ERROR_INVALID_ARGUMENT) << fa_status_name(status) << ": " << message;
    EXPECT_NE(message.find(b.mentions), std::string::npos) << "message does not name '" << b.mentions << "': " << message;
}

INSTANTIATE_TEST_SUITE_P(Arguments, BackwardRejects, ::testing::ValuesIn(backward_breaks()),
                         [](const auto& info) { return strip(info.param.name); });

// Several arguments wrong at once, drawn at random (fixed seed) from the lists above: the call is
// refused, its message names one of them, and nothing crashes or reads what validation has not
// cleared. (A check that trusted an earlier one, e.g. a stride check that assumed a valid head_dim,
// would show here.)
template <typename Break>
std::vector<std::vector<const Break*>> random_break_sets(const std::vector<Break>& breaks, uint64_t seed, int sets) {
    std::mt19937_64 rng(seed);
    std::vector<std::vector<const Break*>> out;
    while (int(out.size()) < sets) {
        const Break& first = breaks[rng() % breaks.size()];
        std::vector<const Break*> set{&first};
        const int count = 2 + int(rng() % 2);
        for (int attempt = 0; attempt < 20 && int(set.size()) < count; ++attempt) {
            const Break& b = breaks[rng() % breaks.size()];
            if (b.varlen == first.varlen && std::find(set.begin(), set.end(), &b) == set.end()) set.push_back(&b);
        }
        out.push_back(set);
    }
    return out;
}

template <typename Break>
std::string names_and_mentions(const std::vector<const Break*>& set, bool* mentioned, const std::string& message) {
    std::string names;
    *mentioned = false;
    for (const Break* b : set) {
        names += (names.empty() ? "" : " + ") + b->name;
        *mentioned |= message.find(b->mentions) != std::string::npos;
    }
    return names;
}

TEST(ApiRejects, SeveralWrongArgumentsAtOnce) {
    const std::vector<FwdBreak> fwd = forward_breaks();
    for (const auto& set : random_break_sets(fwd, 0xBAD1, 300)) {
        AttentionRun run(set[0]->varlen ? valid_varlen() : valid_dense());
        fa_fwd_params p = run.fwd_params();
        for (const FwdBreak* b : set) b->mutate(p, run);
        const fa_status status = set[0]->varlen ? fa_varlen_forward(&p) : fa_forward(&p);
        const std::string message = fa_last_error();
        bool mentioned = false;
        const std::string names = names_and_mentions(set, &mentioned, message);
        EXPECT_NE(status, FA_OK) << names;
        EXPECT_TRUE(mentioned) << names << ": " << message;
    }
    const std::vector<BwdBreak> bwd = backward_breaks();
    for (const auto& set : random_break_sets(bwd, 0xBAD2, 200)) {
        AttentionRun run(set[0]->varlen ? valid_varlen() : valid_dense());
        fa_bwd_params p = run.bwd_params();
        for (const BwdBreak* b : set) b->mutate(p, run);
        const fa_status status = set[0]->varlen ? fa_varlen_backward(&p) : fa_backward(&p);
        const std::string message = fa_last_error();
        bool mentioned = false;
        const std::string names = names_and_mentions(set, &mentioned, message);
        EXPECT_EQ(status, FA_ERROR_INVALID_ARGUMENT) << names << ": " << message;
        EXPECT_TRUE(mentioned) << names << ": " << message;
    }
}

TEST(ApiRejects, NullParamsPointers) {
    EXPECT_EQ(fa_forward(nullptr), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fa_last_error()).find("params"), std::string::npos) << fa_last_error();
    EXPECT_EQ(fa_varlen_forward(nullptr), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(fa_backward(nullptr), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fa_last_error()).find("params"), std::string::npos) << fa_last_error();
    EXPECT_EQ(fa_varlen_backward(nullptr), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(fa_bwd_workspace_size(nullptr), 0u);
}

TEST(ApiRejects, DenseParamsThroughTheVarlenEntryPoint) {
    AttentionRun run(valid_dense());
    const fa_fwd_params p = run.fwd_params();
    EXPECT_EQ(fa_varlen_forward(&p), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fa_last_error()).find("cu_seqlens_q"), std::string::npos) << fa_last_error();
}

TEST(ApiRejects, VarlenParamsThroughTheDenseEntryPoint) {
    AttentionRun run(valid_varlen());
    const fa_fwd_params p = run.fwd_params();
    EXPECT_EQ(fa_forward(&p), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fa_last_error()).find("varlen"), std::string::npos) << fa_last_error();
}

TEST(ApiRejects, CudaBackendForHostMemory) {
    AttentionRun run(valid_dense());
    fa_fwd_params p = run.fwd_params();
    p.backend = FA_BACKEND_CUDA;
    const fa_status status = fa_forward(&p);
    const std::string message = fa_last_error();
    if (fa_cuda_available()) {
        EXPECT_EQ(status, FA_ERROR_INVALID_ARGUMENT) << message;
        EXPECT_NE(message.find("q.data"), std::string::npos) << message;
    } else {
        EXPECT_EQ(status, FA_ERROR_BACKEND_UNAVAILABLE) << message;
        EXPECT_NE(message.find("FA_BACKEND_CUDA"), std::string::npos) << message;
    }
}

TEST(ApiRejects, ErrorMessageIsClearedBySuccessfulCallsAndStatusesHaveNames) {
    fa_forward(nullptr);
    EXPECT_STRNE(fa_last_error(), "");
    for (fa_status s : {FA_OK, FA_ERROR_INVALID_ARGUMENT, FA_ERROR_UNSUPPORTED, FA_ERROR_BACKEND_UNAVAILABLE,
                        FA_ERROR_DEVICE, FA_ERROR_OUT_OF_MEMORY, FA_ERROR_INTERNAL})
        EXPECT_EQ(std::string(fa_status_name(s)).rfind("FA_", 0), 0u);
    AttentionRun run(valid_dense());
    const fa_fwd_params p = run.fwd_params();
    ASSERT_EQ(fa_forward(&p), FA_OK) << fa_last_error();
    EXPECT_STREQ(fa_last_error(), "");
}

TEST(ApiAccepts, TheValidBaselines) {
    // The cases above break one thing of these; if these fail, the cases above prove nothing.
    for (bool varlen : {false, true}) {
        AttentionRun run(varlen ? valid_varlen() : valid_dense());
        const fa_fwd_params p = run.fwd_params();
        EXPECT_EQ(varlen ? fa_varlen_forward(&p) : fa_forward(&p), FA_OK) << fa_last_error();
        const fa_bwd_params bp = run.bwd_params();
        EXPECT_EQ(varlen ? fa_varlen_backward(&bp) : fa_backward(&bp), FA_OK) << fa_last_error();
    }
}

TEST(ApiAccepts, EmptyProblems) {
    // Zero-length sequences are legal: nothing to compute, nothing to read (data may be NULL).
    Case c = valid_dense();
    c.seqlen_q = 0;
    c.seqused_k.clear();
    AttentionRun run(c);
    fa_fwd_params p = run.fwd_params();
    p.q.data = p.out.data = nullptr;
    EXPECT_EQ(fa_forward(&p), FA_OK) << fa_last_error();
    fa_bwd_params bp = run.bwd_params();
    bp.fwd.q.data = bp.fwd.out.data = bp.dout.data = bp.dq.data = nullptr;
    bp.fwd.softmax_lse = nullptr;
    EXPECT_EQ(fa_backward(&bp), FA_OK) << fa_last_error();
}

// fa_forward_with_workspace: the CPU backend needs no scratch and ignores a caller's (a host buffer
// here, of any size); a size without a pointer is refused on every backend. The CUDA side (an
// exact, NaN-filled workspace gives the library's own bits): tests/gpu/test_inference.py.
TEST(ForwardWorkspace, TheCpuBackendNeedsNoneAndIgnoresOne) {
    for (bool varlen : {false, true}) {
        SCOPED_TRACE(varlen ? "varlen" : "dense");
        AttentionRun run(varlen ? valid_varlen() : valid_dense());
        const fa_fwd_params p = run.fwd_params();
        const auto with_workspace = varlen ? fa_varlen_forward_with_workspace : fa_forward_with_workspace;
        EXPECT_EQ(fa_forward_workspace_size(&p), 0u) << fa_last_error();
        // NaN before each call (varlen's spare rows stay so in both).
        std::memset(run.out.data(), 0xff, run.out.bytes());
        ASSERT_EQ(varlen ? fa_varlen_forward(&p) : fa_forward(&p), FA_OK) << fa_last_error();
        const Tensor out_without = run.out;
        std::memset(run.out.data(), 0xff, run.out.bytes());
        std::vector<unsigned char> scratch(64);
        ASSERT_EQ(with_workspace(&p, scratch.data(), 1), FA_OK) << fa_last_error();
        EXPECT_EQ(std::memcmp(out_without.data(), run.out.data(), run.out.bytes()), 0);
        ASSERT_EQ(with_workspace(&p, nullptr, 0), FA_OK) << fa_last_error(); // = fa_forward
        EXPECT_EQ(with_workspace(&p, nullptr, 4096), FA_ERROR_INVALID_ARGUMENT);
        EXPECT_NE(std::string(fa_last_error()).find("workspace_size is 4096 but workspace is NULL"), std::string::npos)
            << fa_last_error();
    }
    // Invalid params: 0, and the reason in fa_last_error (as fa_forward would say it).
    EXPECT_EQ(fa_forward_workspace_size(nullptr), 0u);
    EXPECT_NE(std::string(fa_last_error()).find("params"), std::string::npos) << fa_last_error();
    EXPECT_EQ(fa_forward_with_workspace(nullptr, nullptr, 0), FA_ERROR_INVALID_ARGUMENT);
    AttentionRun run(valid_dense());
    fa_fwd_params p = run.fwd_params();
    p.head_dim = 0;
    EXPECT_EQ(fa_forward_workspace_size(&p), 0u);
    EXPECT_NE(std::string(fa_last_error()).find("head_dim"), std::string::npos) << fa_last_error();
}

TEST(ApiOverrides, AreParsedAndABadOneIsRefusedByName) {
    EXPECT_EQ(fa_set_overrides("forward_kernel=sm80,inference_kernel=tile64"), FA_OK) << fa_last_error();
    EXPECT_EQ(fa_set_overrides("forward_kernel=sm70"), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fa_last_error()).find("forward_kernel"), std::string::npos) << fa_last_error();
    EXPECT_EQ(fa_set_overrides("colour=blue"), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fa_last_error()).find("colour"), std::string::npos) << fa_last_error();
    // The CPU kernels follow cpu_isa (generic: the portable build) and give the same answer.
    AttentionRun run(valid_dense());
    EXPECT_EQ(fa_set_overrides("cpu_isa=generic,cpu_blocks=16x32x16x32"), FA_OK);
    ASSERT_EQ(run.forward(), FA_OK) << run.last_error();
    expect_forward_matches_reference(run);
    EXPECT_EQ(fa_set_overrides(nullptr), FA_OK);
    EXPECT_EQ(fa_set_overrides(""), FA_OK);
}

TEST(ApiDeviceFaults, NeedTheCudaBackend) {
    if (fa_cuda_available()) GTEST_SKIP() << "a CUDA device is present: tests/python/test_device_indices.py covers it";
    EXPECT_EQ(fa_check_device_faults(0, nullptr), FA_ERROR_BACKEND_UNAVAILABLE);
    EXPECT_NE(std::string(fa_last_error()).find("CPU backend reports bad values at the call"), std::string::npos)
        << fa_last_error();
}

TEST(ApiInfo, VersionAndThreads) {
    EXPECT_STREQ(fa_version_string(), "0.1.0");
    fa_set_num_threads(1);
    EXPECT_EQ(fa_get_num_threads(), 1);
    fa_set_num_threads(0);
    EXPECT_GE(fa_get_num_threads(), 1);
    fa_set_num_threads(-5); // treated as "default"
    EXPECT_GE(fa_get_num_threads(), 1);
}

} // namespace
} // namespace flashattn::testing
