// Every argument of the inference path that can be wrong (fa_kvcache_params, the block table fields
// of fa_fwd_params, fa_combine_params): each case starts from a valid call and breaks one thing; the
// call must fail with the right status and a message that names the argument. Also: callers built
// against earlier headers (0.1.0's, or the one before rng_state: smaller struct_sizes) keep working.
#include "support/test_support.h"

#include <cstddef>
#include <cstring>
#include <functional>
#include <limits>

namespace flashattn::testing {
namespace {

// A small valid KV-cache call: contiguous cache with 3 entries, cache_batch_idx, leftpad, rotary.
struct KvInputs {
    static constexpr int kBatch = 2, kSeqQ = 1, kNew = 1, kCap = 32, kHeads = 4, kHeadsK = 2, kDim = 16, kCacheBatch = 3;
    Tensor q{FA_FLOAT16, kBatch, kSeqQ, kHeads, kDim, Layout::bshd};
    Tensor out{FA_FLOAT16, kBatch, kSeqQ, kHeads, kDim, Layout::bshd};
    Tensor k_cache{FA_FLOAT16, kCacheBatch, kCap, kHeadsK, kDim, Layout::bshd};
    Tensor v_cache{FA_FLOAT16, kCacheBatch, kCap, kHeadsK, kDim, Layout::bshd};
    Tensor k_new{FA_FLOAT16, kBatch, kNew, kHeadsK, kDim, Layout::bshd};
    Tensor v_new{FA_FLOAT16, kBatch, kNew, kHeadsK, kDim, Layout::bshd};
    std::vector<int32_t> cache_seqlens{5, 7}, batch_idx{2, 0}, leftpad{1, 0};
    std::vector<uint16_t> cos = std::vector<uint16_t>(40 * 4, 0x3c00), sin = std::vector<uint16_t>(40 * 4, 0);
    std::vector<float> lse = std::vector<float>(kBatch * kHeads * kSeqQ);
    // Paged variant: 4 blocks of 16 rows, 2 per sequence.
    Tensor k_pool{FA_FLOAT16, 4, 16, kHeadsK, kDim, Layout::bshd};
    Tensor v_pool{FA_FLOAT16, 4, 16, kHeadsK, kDim, Layout::bshd};
    std::vector<int32_t> table{3, 1, 0, 2};

    KvInputs() {
        std::mt19937_64 rng(3);
        for (Tensor* t : {&q, &k_cache, &v_cache, &k_new, &v_new, &k_pool, &v_pool}) t->fill_normal(rng);
    }

    fa_kvcache_params params() {
        fa_kvcache_params p;
        fa_kvcache_params_init(&p);
        fa_fwd_params& f = p.fwd;
        f.dtype = FA_FLOAT16;
        f.batch = kBatch;
        f.seqlen_q = kSeqQ;
        f.seqlen_k = kCap;
        f.num_heads = kHeads;
        f.num_heads_k = kHeadsK;
        f.head_dim = kDim;
        f.q = q.view();
        f.k = k_cache.view();
        f.v = v_cache.view();
        f.out = out.view();
        f.softmax_lse = lse.data();
        f.causal = 1;
        f.backend = FA_BACKEND_CPU;
        p.batch_cache = kCacheBatch;
        p.cache_seqlens = cache_seqlens.data();
        p.cache_batch_idx = batch_idx.data();
        p.cache_leftpad = leftpad.data();
        p.k_new = k_new.view();
        p.v_new = v_new.view();
        p.seqlen_new = kNew;
        p.rotary_cos = cos.data();
        p.rotary_sin = sin.data();
        p.rotary_dim = 8;
        p.seqlen_rotary = 40;
        return p;
    }

    fa_kvcache_params paged_params() {
        fa_kvcache_params p = params();
        p.cache_batch_idx = nullptr;
        p.fwd.k = k_pool.view();
        p.fwd.v = v_pool.view();
        p.fwd.block_table = table.data();
        p.fwd.block_table_batch_stride = 2;
        p.fwd.max_blocks_per_seq = 2;
        p.fwd.page_size = 16;
        p.fwd.num_blocks = 4;
        return p;
    }
};

struct KvBreak {
    std::string name;
    bool paged;
    std::function<void(fa_kvcache_params&, KvInputs&)> mutate;
    std::string mentions;
    fa_status expected = FA_ERROR_INVALID_ARGUMENT;
};

std::vector<KvBreak> kvcache_breaks() {
    using P = fa_kvcache_params;
    using I = KvInputs;
    std::vector<KvBreak> list{
        {"struct_size", false, [](P& p, I&) { p.struct_size = 8; }, "struct_size"},
        {"fwd_struct_size", false, [](P& p, I&) { p.fwd.struct_size = 8; }, "fwd.struct_size"},
        {"cache_seqlens_null", false, [](P& p, I&) { p.cache_seqlens = nullptr; }, "cache_seqlens"},
        {"cache_seqlens_negative", false, [](P&, I& in) { in.cache_seqlens[0] = -1; }, "cache_seqlens[0]"},
        {"cache_seqlens_no_room_to_append", false, [](P&, I& in) { in.cache_seqlens[1] = 32; }, "cache_seqlens[1]"},
        {"cache_leftpad_beyond_length", false, [](P&, I& in) { in.leftpad[0] = 6; }, "cache_leftpad[0]"},
        {"cache_leftpad_negative", false, [](P&, I& in) { in.leftpad[1] = -2; }, "cache_leftpad[1]"},
        {"cache_batch_idx_out_of_range", false, [](P&, I& in) { in.batch_idx[0] = 3; }, "cache_batch_idx[0]"},
        {"cache_batch_idx_duplicate", false, [](P&, I& in) { in.batch_idx[1] = 2; }, "cache_batch_idx"},
        {"batch_cache_zero", false, [](P& p, I&) { p.batch_cache = 0; }, "batch_cache"},
        {"batch_cache_below_batch", false, [](P& p, I&) { p.cache_batch_idx = nullptr; p.batch_cache = 1; }, "batch_cache"},
        {"v_new_missing", false, [](P& p, I&) { p.v_new.data = nullptr; }, "v_new"},
        {"seqlen_new_negative", false, [](P& p, I&) { p.seqlen_new = -1; }, "seqlen_new"},
        {"seqlen_new_above_capacity", false, [](P& p, I&) { p.seqlen_new = 33; }, "seqlen_new"},
        {"seqlen_new_without_k_new", false, [](P& p, I&) { p.k_new.data = p.v_new.data = nullptr; p.rotary_cos = p.rotary_sin = nullptr; }, "seqlen_new"},
        {"k_new_row_stride_negative", false, [](P& p, I&) { p.k_new.row_stride = -1; }, "k_new.row_stride"},
        {"v_new_head_stride_negative", false, [](P& p, I&) { p.v_new.head_stride = -1; }, "v_new.head_stride"},
        {"rotary_sin_missing", false, [](P& p, I&) { p.rotary_sin = nullptr; }, "rotary_sin"},
        {"rotary_dim_odd", false, [](P& p, I&) { p.rotary_dim = 7; }, "rotary_dim"},
        {"rotary_dim_above_head_dim", false, [](P& p, I&) { p.rotary_dim = 18; }, "rotary_dim"},
        {"rotary_dim_zero", false, [](P& p, I&) { p.rotary_dim = 0; }, "rotary_dim"},
        {"seqlen_rotary_too_short", false, [](P& p, I&) { p.seqlen_rotary = 7; }, "seqlen_rotary"},
        {"rotary_without_new_keys", false, [](P& p, I&) { p.k_new.data = p.v_new.data = nullptr; p.seqlen_new = 0; }, "k_new"},
        {"dropout", false, [](P& p, I&) { p.fwd.dropout_p = 0.1f; }, "dropout_p"},
        {"cu_seqlens_q", false, [](P& p, I& in) { p.fwd.cu_seqlens_q = in.cache_seqlens.data(); }, "cu_seqlens_q"},
        {"seqused_k", false, [](P& p, I& in) { p.fwd.seqused_k = in.cache_seqlens.data(); }, "seqused_k"},
        {"attn_probs", false, [](P& p, I& in) { p.fwd.attn_probs = in.lse.data(); }, "attn_probs"},
        {"k_cache_rows_alias", false, [](P& p, I&) { p.fwd.k.row_stride = 0; }, "k"},
        {"k_cache_null", false, [](P& p, I&) { p.fwd.k.data = nullptr; }, "k.data"},
        {"workspace_size_without_workspace", false, [](P& p, I&) { p.workspace_size = 4096; }, "workspace"},
        // Paged.
        {"page_size_not_multiple_of_16", true, [](P& p, I&) { p.fwd.page_size = 24; }, "page_size"},
        {"page_size_8", true, [](P& p, I&) { p.fwd.page_size = 8; }, "page_size"},
        {"max_blocks_per_seq_zero", true, [](P& p, I&) { p.fwd.max_blocks_per_seq = 0; }, "max_blocks_per_seq"},
        {"block_table_stride_short", true, [](P& p, I&) { p.fwd.block_table_batch_stride = 1; }, "block_table_batch_stride"},
        {"num_blocks_zero", true, [](P& p, I&) { p.fwd.num_blocks = 0; }, "num_blocks"},
        {"seqlen_k_beyond_table", true, [](P& p, I&) { p.fwd.seqlen_k = 33; }, "seqlen_k"},
        // Past the table's capacity (2 pages of 16 rows), with and without appended keys.
        {"paged_cache_seqlens_past_capacity", true, [](P& p, I& in) { p.k_new.data = p.v_new.data = nullptr; p.seqlen_new = 0; p.rotary_cos = p.rotary_sin = nullptr; in.cache_seqlens[0] = 33; }, "cache_seqlens[0]"},
        {"paged_appended_keys_past_capacity", true, [](P&, I& in) { in.cache_seqlens[1] = 32; }, "cache_seqlens[1]"},
        {"block_index_out_of_range", true, [](P&, I& in) { in.table[0] = 4; }, "block_table[0][0]"},
        {"block_index_negative", true, [](P&, I& in) { in.cache_seqlens[1] = 20; in.table[3] = -1; }, "block_table[1][1]"},
        {"paged_with_cache_batch_idx", true, [](P& p, I& in) { p.cache_batch_idx = in.batch_idx.data(); }, "cache_batch_idx"},
    };
    return list;
}

class KvCacheBadInput : public ::testing::TestWithParam<KvBreak> {};

TEST_P(KvCacheBadInput, IsRejectedWithAMessageNamingIt) {
    const KvBreak& br = GetParam();
    KvInputs in;
    fa_kvcache_params p = br.paged ? in.paged_params() : in.params();
    {
        // The unbroken call succeeds, so the failure below can only come from the break.
        KvInputs fresh;
        fa_kvcache_params ok = br.paged ? fresh.paged_params() : fresh.params();
        ASSERT_EQ(fa_kvcache_forward(&ok), FA_OK) << fa_last_error();
    }
    br.mutate(p, in);
    const Tensor k_before = br.paged ? in.k_pool : in.k_cache;
    EXPECT_EQ(fa_kvcache_forward(&p), br.expected);
    const std::string message = fa_last_error();
    EXPECT_NE(message.find(br.mentions), std::string::npos) << "message: " << message;
    const Tensor& k_after = br.paged ? in.k_pool : in.k_cache;
    EXPECT_EQ(std::memcmp(k_before.data(), k_after.data(), k_after.bytes()), 0) << "a rejected call wrote to the cache";
}

INSTANTIATE_TEST_SUITE_P(Api, KvCacheBadInput, ::testing::ValuesIn(kvcache_breaks()),
                         [](const ::testing::TestParamInfo<KvBreak>& info) { return info.param.name; });

TEST(PagedBadInput, BackwardRefusesABlockTable) {
    Case c;
    c.seqlen_q = c.seqlen_k = 16;
    c.head_dim = 16;
    AttentionRun run(c);
    ASSERT_EQ(run.forward(), FA_OK);
    std::vector<int32_t> table{0, 1};
    fa_bwd_params p = run.bwd_params();
    p.fwd.block_table = table.data();
    p.fwd.block_table_batch_stride = 1;
    p.fwd.max_blocks_per_seq = 1;
    p.fwd.page_size = 16;
    p.fwd.num_blocks = 2;
    p.fwd.k.batch_stride = p.fwd.v.batch_stride = 16 * c.heads_k * c.head_dim;
    EXPECT_EQ(fa_backward(&p), FA_ERROR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(fa_last_error()).find("block_table"), std::string::npos) << fa_last_error();
}

// ---------------------------------------------------------------------------------------------
// fa_combine.

struct CombineInputs {
    std::vector<float> partial = std::vector<float>(2 * 3 * 4 * 8, 0.5f), partial_lse = std::vector<float>(2 * 3 * 4, 0.0f);
    std::vector<float> out = std::vector<float>(3 * 4 * 8), lse = std::vector<float>(3 * 4);

    fa_combine_params params() {
        fa_combine_params p;
        fa_combine_params_init(&p);
        p.num_splits = 2;
        p.batch = 1;
        p.seqlen_q = 3;
        p.num_heads = 4;
        p.head_dim = 8;
        p.out_partial = fa_tensor{partial.data(), 96, 32, 8};
        p.out_partial_split_stride = 96;
        p.lse_partial = fa_lse_view{partial_lse.data(), 12, 3, 1};
        p.lse_partial_split_stride = 12;
        p.dtype = FA_FLOAT32;
        p.out = fa_tensor{out.data(), 96, 32, 8};
        p.lse = fa_lse_view{lse.data(), 12, 3, 1};
        p.backend = FA_BACKEND_CPU;
        return p;
    }
};

TEST(CombineBadInput, EveryBrokenArgumentIsNamed) {
    using P = fa_combine_params;
    const std::vector<std::pair<std::function<void(P&)>, std::string>> breaks{
        {[](P& p) { p.struct_size = 4; }, "struct_size"},
        {[](P& p) { p.num_splits = 0; }, "num_splits"},
        {[](P& p) { p.batch = 0; }, "batch"},
        {[](P& p) { p.seqlen_q = -1; }, "seqlen_q"},
        {[](P& p) { p.num_heads = 0; }, "num_heads"},
        {[](P& p) { p.head_dim = 0; }, "head_dim"},
        {[](P& p) { p.out_partial.data = nullptr; }, "out_partial.data"},
        {[](P& p) { p.out_partial.row_stride = -1; }, "out_partial.row_stride"},
        {[](P& p) { p.out_partial_split_stride = -96; }, "out_partial_split_stride"},
        {[](P& p) { p.lse_partial.data = nullptr; }, "lse_partial.data"},
        {[](P& p) { p.lse_partial.head_stride = -3; }, "lse_partial.head_stride"},
        {[](P& p) { p.lse_partial_split_stride = -1; }, "lse_partial_split_stride"},
        {[](P& p) { p.out.data = nullptr; }, "out.data"},
        {[](P& p) { p.out.row_stride = 0; }, "out"},
        {[](P& p) { p.lse.row_stride = 0; }, "lse"},
        {[](P& p) { int32_t bad = 9; std::memcpy(&p.dtype, &bad, sizeof bad); }, "dtype"},
        {[](P& p) { int32_t bad = 5; std::memcpy(&p.backend, &bad, sizeof bad); }, "backend"},
    };
    for (const auto& [mutate, mentions] : breaks) {
        CombineInputs in;
        fa_combine_params p = in.params();
        ASSERT_EQ(fa_combine(&p), FA_OK) << fa_last_error();
        mutate(p);
        EXPECT_EQ(fa_combine(&p), FA_ERROR_INVALID_ARGUMENT) << mentions;
        EXPECT_NE(std::string(fa_last_error()).find(mentions), std::string::npos) << fa_last_error();
    }
}

// ---------------------------------------------------------------------------------------------
// A caller compiled against an earlier header passes the smaller struct_size: 0.1.0's (before the
// block table fields), the one before rng_state or the one before head_dim_v. The fields it does not
// know take their defaults (whatever bytes follow its struct are never read).

constexpr size_t kFwdSize_0_1 = offsetof(fa_fwd_params, block_table);
constexpr size_t kFwdSizeBeforeRngState = offsetof(fa_fwd_params, rng_state);
constexpr size_t kFwdSizeBeforeHeadDimV = offsetof(fa_fwd_params, head_dim_v);
// fa_bwd_params after its fwd member as every header before dsink had it.
constexpr size_t kBwdTailBeforeDsink = offsetof(fa_bwd_params, dsink) - offsetof(fa_bwd_params, dout);
constexpr size_t old_bwd_size(size_t old_fwd) { return offsetof(fa_bwd_params, fwd) + old_fwd + kBwdTailBeforeDsink; }

// With dropout by value: garbage where rng_state would be must not be taken for a pointer.
Case versioning_case(int seqlen_q, int seqlen_k) {
    Case c;
    c.seqlen_q = seqlen_q;
    c.seqlen_k = seqlen_k;
    c.causal = true;
    c.dropout_p = 0.2f;
    c.rng_seed = 0x1234567890abcdefull;
    c.rng_offset = 77;
    return c;
}

void expect_forward_with_fwd_layout_works(size_t old_size) {
    AttentionRun run(versioning_case(37, 50));
    fa_fwd_params p = run.fwd_params();
    p.struct_size = uint32_t(old_size);
    // Garbage where the new fields would be: an old caller's memory ends before them.
    std::memset(reinterpret_cast<char*>(&p) + old_size, 0x5a, sizeof(p) - old_size);
    run.out.poison();
    ASSERT_EQ(fa_forward(&p), FA_OK) << fa_last_error();
    expect_forward_matches_reference(run);
}

// Lays out today's fa_bwd_params as a header whose fwd member was old_fwd bytes did: fwd without
// the appended fields, the rest right after it.
void expect_backward_with_fwd_layout_works(size_t old_fwd) {
    AttentionRun run(versioning_case(29, 41));
    ASSERT_EQ(run.forward(), FA_OK);
    const fa_bwd_params current = run.bwd_params();
    const size_t fwd_at = offsetof(fa_bwd_params, fwd), tail_at = offsetof(fa_bwd_params, dout);
    const size_t tail = kBwdTailBeforeDsink;
    std::vector<unsigned char> old(fwd_at + old_fwd + tail + 64, 0xa5);
    std::memcpy(old.data(), &current, fwd_at);
    std::memcpy(old.data() + fwd_at, &current.fwd, old_fwd);
    std::memcpy(old.data() + fwd_at + old_fwd, reinterpret_cast<const char*>(&current) + tail_at, tail);
    const uint32_t old_size = uint32_t(fwd_at + old_fwd + tail);
    std::memcpy(old.data(), &old_size, sizeof old_size);
    uint32_t old_fwd_size = uint32_t(old_fwd);
    std::memcpy(old.data() + fwd_at, &old_fwd_size, sizeof old_fwd_size);
    run.dq.poison();
    run.dk.poison();
    run.dv.poison();
    ASSERT_EQ(fa_backward(reinterpret_cast<const fa_bwd_params*>(old.data())), FA_OK) << fa_last_error();
    expect_backward_matches_reference(run);
}

TEST(StructVersioning, ForwardWith0_1ParamsStillWorks) { expect_forward_with_fwd_layout_works(kFwdSize_0_1); }
TEST(StructVersioning, ForwardWithParamsBeforeRngStateStillWorks) {
    expect_forward_with_fwd_layout_works(kFwdSizeBeforeRngState);
}
TEST(StructVersioning, ForwardWithParamsBeforeHeadDimVStillWorks) {
    expect_forward_with_fwd_layout_works(kFwdSizeBeforeHeadDimV);
}
TEST(StructVersioning, BackwardWith0_1ParamsStillWorks) { expect_backward_with_fwd_layout_works(kFwdSize_0_1); }
TEST(StructVersioning, BackwardWithParamsBeforeRngStateStillWorks) {
    expect_backward_with_fwd_layout_works(kFwdSizeBeforeRngState);
}
TEST(StructVersioning, BackwardWithParamsBeforeHeadDimVStillWorks) {
    expect_backward_with_fwd_layout_works(kFwdSizeBeforeHeadDimV);
}

TEST(StructVersioning, TheSizedInitialisersWriteOnlyTheLayoutBeforeRngState) {
    std::vector<unsigned char> fwd(sizeof(fa_fwd_params) + 16, 0xa5);
    fa_fwd_params_init_sized(reinterpret_cast<fa_fwd_params*>(fwd.data()), kFwdSizeBeforeRngState);
    for (size_t i = kFwdSizeBeforeRngState; i < fwd.size(); ++i) ASSERT_EQ(fwd[i], 0xa5) << "byte " << i;
    EXPECT_EQ(reinterpret_cast<const fa_fwd_params*>(fwd.data())->window_left, -1);

    const size_t old_bwd = old_bwd_size(kFwdSizeBeforeRngState);
    std::vector<unsigned char> bwd(sizeof(fa_bwd_params) + 16, 0xa5);
    fa_bwd_params_init_sized(reinterpret_cast<fa_bwd_params*>(bwd.data()), old_bwd);
    for (size_t i = old_bwd; i < bwd.size(); ++i) ASSERT_EQ(bwd[i], 0xa5) << "byte " << i;
    const auto* b = reinterpret_cast<const fa_bwd_params*>(bwd.data());
    EXPECT_EQ(b->struct_size, old_bwd);
    EXPECT_EQ(b->fwd.struct_size, kFwdSizeBeforeRngState);
    EXPECT_EQ(b->fwd.num_splits, 1);
}

TEST(StructVersioning, The0_1InitSymbolsWriteOnlyThe0_1Layout) {
    // A 0.1.0 binary calls the exported functions (no macro) on its smaller structs.
    std::vector<unsigned char> fwd(sizeof(fa_fwd_params) + 16, 0xa5);
    (fa_fwd_params_init)(reinterpret_cast<fa_fwd_params*>(fwd.data()));
    for (size_t i = kFwdSize_0_1; i < fwd.size(); ++i) ASSERT_EQ(fwd[i], 0xa5) << "byte " << i << " past the 0.1.0 struct";
    const auto* p = reinterpret_cast<const fa_fwd_params*>(fwd.data());
    EXPECT_EQ(p->struct_size, kFwdSize_0_1);
    EXPECT_EQ(p->window_left, -1);
    EXPECT_EQ(p->num_splits, 1);

    const size_t old_bwd = old_bwd_size(kFwdSize_0_1);
    std::vector<unsigned char> bwd(sizeof(fa_bwd_params) + 16, 0xa5);
    (fa_bwd_params_init)(reinterpret_cast<fa_bwd_params*>(bwd.data()));
    for (size_t i = old_bwd; i < bwd.size(); ++i) ASSERT_EQ(bwd[i], 0xa5) << "byte " << i << " past the 0.1.0 struct";
    EXPECT_EQ(reinterpret_cast<const fa_bwd_params*>(bwd.data())->struct_size, old_bwd);
    EXPECT_EQ(reinterpret_cast<const fa_bwd_params*>(bwd.data())->fwd.struct_size, kFwdSize_0_1);

    // Today's callers (the macros) get today's sizes.
    fa_fwd_params now;
    fa_fwd_params_init(&now);
    EXPECT_EQ(now.struct_size, sizeof(fa_fwd_params));
    fa_kvcache_params kv_now;
    fa_kvcache_params_init(&kv_now);
    EXPECT_EQ(kv_now.struct_size, sizeof(fa_kvcache_params));
    EXPECT_EQ(kv_now.fwd.struct_size, sizeof(fa_fwd_params));
}

// The earlier layouts of fa_kvcache_params: an fwd member of old_fwd bytes, the fields after it that
// much earlier, the struct ending at workspace or after workspace_size.
constexpr size_t old_kvcache_size(size_t old_fwd, bool workspace) {
    return (workspace ? sizeof(fa_kvcache_params) : offsetof(fa_kvcache_params, workspace)) -
           (sizeof(fa_fwd_params) - old_fwd);
}
// Before the workspace fields (and head_dim_v): the rng_state fwd member, the struct ending at workspace.
constexpr size_t kKvSizeBeforeWorkspace = old_kvcache_size(kFwdSizeBeforeHeadDimV, false);

// `current` laid out as that header did, over `old` (which keeps its bytes past the struct).
void lay_out_kvcache_params(fa_kvcache_params current, size_t old_fwd, bool workspace, std::vector<unsigned char>& old) {
    const size_t fwd_at = offsetof(fa_kvcache_params, fwd), tail_at = offsetof(fa_kvcache_params, batch_cache);
    const size_t size = old_kvcache_size(old_fwd, workspace);
    current.struct_size = uint32_t(size);
    current.fwd.struct_size = uint32_t(old_fwd);
    std::memcpy(old.data(), &current, fwd_at + old_fwd);
    std::memcpy(old.data() + fwd_at + old_fwd, reinterpret_cast<const char*>(&current) + tail_at,
                size - fwd_at - old_fwd);
}

// Runs fa_kvcache_forward on `old_params` (in's call laid out as an earlier header did), then in's
// call in today's layout on the caches as they were: out must be the same bytes.
void expect_same_out_as_todays_layout(KvInputs& in, const void* old_params) {
    const Tensor k_before = in.k_cache, v_before = in.v_cache; // the call appends in place
    ASSERT_EQ(fa_kvcache_forward(static_cast<const fa_kvcache_params*>(old_params)), FA_OK) << fa_last_error();
    const Tensor out_old = in.out;
    in.k_cache = k_before;
    in.v_cache = v_before;
    fa_kvcache_params now = in.params();
    ASSERT_EQ(fa_kvcache_forward(&now), FA_OK) << fa_last_error();
    EXPECT_EQ(std::memcmp(out_old.data(), in.out.data(), in.out.bytes()), 0);
}

// fa_kvcache_params (which came with the block table) embeds fa_fwd_params: a binary built before
// rng_state calls the plain fa_kvcache_params_init symbol on its smaller struct, then the library.
TEST(StructVersioning, KvCacheWithParamsBeforeRngStateStillWorks) {
    const size_t shift = sizeof(fa_fwd_params) - kFwdSizeBeforeRngState;
    const size_t old_size = old_kvcache_size(kFwdSizeBeforeRngState, false);
    const size_t fwd_at = offsetof(fa_kvcache_params, fwd), tail_at = offsetof(fa_kvcache_params, batch_cache);
    std::vector<unsigned char> old(sizeof(fa_kvcache_params) + 16, 0xa5);
    (fa_kvcache_params_init)(reinterpret_cast<fa_kvcache_params*>(old.data()));
    for (size_t i = old_size; i < old.size(); ++i) ASSERT_EQ(old[i], 0xa5) << "byte " << i << " past the old struct";
    uint32_t size = 0, fwd_size = 0;
    int32_t batch_cache = 0;
    std::memcpy(&size, old.data(), sizeof size);
    std::memcpy(&fwd_size, old.data() + fwd_at, sizeof fwd_size);
    std::memcpy(&batch_cache, old.data() + tail_at - shift, sizeof batch_cache);
    EXPECT_EQ(size, old_size);
    EXPECT_EQ(fwd_size, kFwdSizeBeforeRngState);
    EXPECT_EQ(batch_cache, 1);

    // The same call as today's struct, laid out the old way, gives the same bytes.
    KvInputs in;
    lay_out_kvcache_params(in.params(), kFwdSizeBeforeRngState, false, old);
    expect_same_out_as_todays_layout(in, old.data());
}

// A binary built between rng_state and the workspace fields: its struct ends at workspace, with
// whatever bytes follow it, and the library reads no workspace from them.
TEST(StructVersioning, KvCacheWithParamsBeforeWorkspaceStillWorks) {
    std::vector<unsigned char> old(sizeof(fa_kvcache_params) + 16, 0xa5);
    fa_kvcache_params_init_sized(reinterpret_cast<fa_kvcache_params*>(old.data()), kKvSizeBeforeWorkspace);
    for (size_t i = kKvSizeBeforeWorkspace; i < old.size(); ++i)
        ASSERT_EQ(old[i], 0xa5) << "byte " << i << " past the old struct";
    const auto* initialised = reinterpret_cast<const fa_kvcache_params*>(old.data());
    EXPECT_EQ(initialised->struct_size, kKvSizeBeforeWorkspace);
    EXPECT_EQ(initialised->fwd.struct_size, kFwdSizeBeforeHeadDimV);
    EXPECT_EQ(initialised->fwd.num_splits, 0);
    int32_t batch_cache = 0;
    std::memcpy(&batch_cache,
                old.data() + offsetof(fa_kvcache_params, batch_cache) - (sizeof(fa_fwd_params) - kFwdSizeBeforeHeadDimV),
                sizeof batch_cache);
    EXPECT_EQ(batch_cache, 1);

    KvInputs in;
    lay_out_kvcache_params(in.params(), kFwdSizeBeforeHeadDimV, false, old); // 0xa5 garbage where workspace would be
    EXPECT_EQ(fa_kvcache_workspace_size(reinterpret_cast<const fa_kvcache_params*>(old.data())), 0u) << fa_last_error();
    expect_same_out_as_todays_layout(in, old.data());
}

// A binary built between the workspace fields and head_dim_v: the rng_state fwd member, then
// everything up to workspace_size that much earlier.
TEST(StructVersioning, KvCacheWithParamsBeforeHeadDimVStillWorks) {
    const size_t old_size = old_kvcache_size(kFwdSizeBeforeHeadDimV, true);
    std::vector<unsigned char> old(sizeof(fa_kvcache_params) + 16, 0xa5);
    fa_kvcache_params_init_sized(reinterpret_cast<fa_kvcache_params*>(old.data()), old_size);
    for (size_t i = old_size; i < old.size(); ++i) ASSERT_EQ(old[i], 0xa5) << "byte " << i << " past the old struct";
    EXPECT_EQ(reinterpret_cast<const fa_kvcache_params*>(old.data())->fwd.struct_size, kFwdSizeBeforeHeadDimV);
    KvInputs in;
    lay_out_kvcache_params(in.params(), kFwdSizeBeforeHeadDimV, true, old);
    EXPECT_EQ(fa_kvcache_workspace_size(reinterpret_cast<const fa_kvcache_params*>(old.data())), 0u) << fa_last_error();
    expect_same_out_as_todays_layout(in, old.data());
}

// The CPU backend needs no scratch and ignores a workspace (a host buffer here, of any size).
TEST(KvCacheWorkspace, TheCpuBackendNeedsNoneAndIgnoresOne) {
    KvInputs in;
    fa_kvcache_params p = in.params();
    EXPECT_EQ(fa_kvcache_workspace_size(&p), 0u) << fa_last_error();
    const Tensor k_before = in.k_cache, v_before = in.v_cache;
    ASSERT_EQ(fa_kvcache_forward(&p), FA_OK) << fa_last_error();
    const Tensor out_without = in.out;
    in.k_cache = k_before;
    in.v_cache = v_before;
    std::vector<unsigned char> scratch(64);
    p = in.params();
    p.workspace = scratch.data();
    p.workspace_size = 1;
    ASSERT_EQ(fa_kvcache_forward(&p), FA_OK) << fa_last_error();
    EXPECT_EQ(std::memcmp(out_without.data(), in.out.data(), in.out.bytes()), 0);
    // Invalid params: 0, and the reason in fa_last_error.
    p.cache_seqlens = nullptr;
    EXPECT_EQ(fa_kvcache_workspace_size(&p), 0u);
    EXPECT_NE(std::string(fa_last_error()).find("cache_seqlens"), std::string::npos) << fa_last_error();
}

} // namespace
} // namespace flashattn::testing
