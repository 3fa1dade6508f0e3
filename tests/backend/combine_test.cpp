// fa_combine: merging partial attention results by their logsumexp.
//   - end to end: attention over key chunks (fa_forward on each chunk, fp32 partials), combined,
//     equals attention over all keys (fp64 reference) within the tolerance rule;
//   - directly against reference::combine on random partials, with empty splits (lse = -inf, output
//     NaN: it must not be read), rows where every split is empty, and strided layouts.
#include "support/device_memory.h"
#include "support/test_support.h"

#include "core/dtype.h"

#include <cmath>
#include <limits>

namespace flashattn::testing {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// fa_combine on `backend`: cp holds host pointers into these buffers; for CUDA they are mirrored on
// the device, and out/lse copied back.
fa_status combine_on(Backend backend, fa_combine_params cp, const std::vector<float>& partial,
                     const std::vector<float>& partial_lse, void* out, size_t out_bytes, std::vector<float>& lse) {
    cp.backend = to_fa_backend(backend);
    if (backend == Backend::cpu) return fa_combine(&cp);
    DeviceMirror m;
    const auto rebase = [](const void* inside, const void* host_base, void* device_base) {
        return static_cast<char*>(device_base) + (static_cast<const char*>(inside) - static_cast<const char*>(host_base));
    };
    void* d_partial = m.mirror(partial.data(), partial.size() * sizeof(float), false);
    void* d_partial_lse = m.mirror(partial_lse.data(), partial_lse.size() * sizeof(float), false);
    void* d_out = m.mirror(out, out_bytes, true);
    void* d_lse = cp.lse.data ? m.mirror(lse.data(), lse.size() * sizeof(float), true) : nullptr;
    cp.out_partial.data = rebase(cp.out_partial.data, partial.data(), d_partial);
    cp.lse_partial.data = reinterpret_cast<float*>(rebase(cp.lse_partial.data, partial_lse.data(), d_partial_lse));
    cp.out.data = rebase(cp.out.data, out, d_out);
    if (d_lse) cp.lse.data = reinterpret_cast<float*>(rebase(cp.lse.data, lse.data(), d_lse));
    const fa_status status = fa_combine(&cp);
    if (status == FA_OK) m.copy_outputs_back();
    return status;
}

// Split keys [0, seqlen_k) at `cuts`; attention on each chunk, then fa_combine.
// The partials come from the CPU backend (fp32 attention); the combine runs on `backend`.
void expect_chunked_attention_combines_to_full(Backend backend, fa_dtype out_dtype, std::vector<int> cuts,
                                               int seqlen_q, int seqlen_k) {
    Case c;
    c.dtype = FA_FLOAT32; // partial outputs are fp32
    c.batch = 2;
    c.seqlen_q = seqlen_q;
    c.seqlen_k = seqlen_k;
    c.heads = 4;
    c.heads_k = 2;
    c.head_dim = 64;
    c.seed = seed_from("combine" + std::to_string(seqlen_k) + std::to_string(cuts.size()));
    AttentionRun full(c);
    const Problem problem = full.problem();
    const auto fp64 = reference::forward(problem, reference::Precision::fp64);
    const auto naive = reference::forward(problem, reference::Precision::same_as_inputs);

    cuts.insert(cuts.begin(), 0);
    cuts.push_back(seqlen_k);
    const int splits = int(cuts.size()) - 1;
    const int64_t out_elems = int64_t(c.batch) * seqlen_q * c.heads * c.head_dim;
    const int64_t lse_elems = int64_t(c.batch) * c.heads * seqlen_q;
    std::vector<float> partial(static_cast<size_t>(splits * out_elems)), partial_lse(size_t(splits * lse_elems));
    for (int s = 0; s < splits; ++s) {
        fa_fwd_params p = full.fwd_params();
        const int64_t first = cuts[size_t(s)], count = cuts[size_t(s) + 1] - first;
        p.seqlen_k = int32_t(count);
        p.k.data = static_cast<float*>(p.k.data) + first * p.k.row_stride;
        p.v.data = static_cast<float*>(p.v.data) + first * p.v.row_stride;
        p.out = fa_tensor{partial.data() + s * out_elems, seqlen_q * c.heads * c.head_dim, c.heads * c.head_dim,
                          c.head_dim};
        p.softmax_lse = partial_lse.data() + s * lse_elems;
        ASSERT_EQ(fa_forward(&p), FA_OK) << fa_last_error();
    }

    Tensor out(out_dtype, c.batch, seqlen_q, c.heads, c.head_dim, Layout::padded);
    out.poison();
    std::vector<float> lse(size_t(lse_elems), std::numeric_limits<float>::quiet_NaN());
    fa_combine_params cp;
    fa_combine_params_init(&cp);
    cp.num_splits = splits;
    cp.batch = c.batch;
    cp.seqlen_q = seqlen_q;
    cp.num_heads = c.heads;
    cp.head_dim = c.head_dim;
    cp.out_partial = fa_tensor{partial.data(), seqlen_q * c.heads * c.head_dim, c.heads * c.head_dim, c.head_dim};
    cp.out_partial_split_stride = out_elems;
    cp.lse_partial = fa_lse_view{partial_lse.data(), c.heads * seqlen_q, seqlen_q, 1};
    cp.lse_partial_split_stride = lse_elems;
    cp.dtype = out_dtype;
    cp.out = out.view();
    cp.lse = fa_lse_view{lse.data(), c.heads * seqlen_q, seqlen_q, 1};
    ASSERT_EQ(combine_on(backend, cp, partial, partial_lse, out.data(), out.bytes(), lse), FA_OK) << fa_last_error();

    EXPECT_TRUE(all_written("out", out, nullptr));
    // One more rounding (to out's dtype) than the fp32 forward: the factor leaves room for it.
    const double factor = out_dtype == FA_FLOAT32 ? 4.0 : 2.0;
    const std::vector<double> naive_out =
        out_dtype == FA_FLOAT32 ? naive.out : [&] { // the naive error at out's precision
            std::vector<double> rounded = naive.out;
            for (double& x : rounded) x = round_to(out_dtype, float(x));
            return rounded;
        }();
    EXPECT_TRUE(within_tolerance("out", out.canonical(), fp64.out, naive_out, factor, out_dtype, nullptr,
                                 {int64_t(c.batch) * seqlen_q, c.heads, c.head_dim}));
    EXPECT_TRUE(within_tolerance("lse", to_double(lse), fp64.lse, naive.lse, 4.0, FA_FLOAT32, nullptr,
                                 {c.batch, c.heads, seqlen_q}));
}

void expect_chunked_attention_combines_to_full(Backend backend) {
    expect_chunked_attention_combines_to_full(backend, FA_FLOAT32, {100, 250}, 7, 400);
    expect_chunked_attention_combines_to_full(backend, FA_BFLOAT16, {1, 2, 3, 200}, 1, 333);
    expect_chunked_attention_combines_to_full(backend, FA_FLOAT16, {64}, 33, 64 + 90);
    // An empty chunk: its rows have lse -inf and out 0, and change nothing.
    expect_chunked_attention_combines_to_full(backend, FA_FLOAT32, {50, 50, 120}, 5, 200);
}

void expect_combine_matches_reference_with_empty_splits_and_strides(Backend backend) {
    std::mt19937_64 rng(7);
    std::normal_distribution<double> normal(0.0, 1.0);
    const int splits = 5, batch = 2, seqlen_q = 9, heads = 3, d = 40;
    // Partial layout (batch, heads, seqlen_q, d) inside each split, with a gap between splits.
    const int64_t split_stride = int64_t(batch) * heads * seqlen_q * d + 11;
    std::vector<float> partial(size_t(splits * split_stride), std::numeric_limits<float>::quiet_NaN());
    const fa_tensor partial_view{partial.data(), heads * seqlen_q * d, d, seqlen_q * d};
    // lse layout (split, seqlen_q, batch, heads): all strides unusual.
    std::vector<float> partial_lse(static_cast<size_t>(splits * seqlen_q * batch * heads));
    const fa_lse_view lse_view{partial_lse.data(), heads, 1, batch * heads};
    const int64_t lse_split_stride = int64_t(seqlen_q) * batch * heads;
    for (int s = 0; s < splits; ++s)
        for (int b = 0; b < batch; ++b)
            for (int i = 0; i < seqlen_q; ++i)
                for (int h = 0; h < heads; ++h) {
                    float& l = partial_lse[size_t(s * lse_split_stride + b * heads + h + i * batch * heads)];
                    // Row i = 0 is empty in every split; split 2 is empty everywhere; others vary widely.
                    const bool empty = i == 0 || s == 2 || (i + s + h) % 4 == 0;
                    l = empty ? -kInf : float(5.0 * normal(rng));
                    if (empty) continue; // its output stays NaN: never read
                    for (int e = 0; e < d; ++e)
                        partial[size_t(s * split_stride + b * partial_view.batch_stride + i * partial_view.row_stride +
                                       h * partial_view.head_stride + e)] = float(normal(rng));
                }
    for (fa_dtype dtype : {FA_FLOAT32, FA_BFLOAT16, FA_FLOAT16}) {
        SCOPED_TRACE(dtype_short(dtype));
        Tensor out(dtype, batch, seqlen_q, heads, d, Layout::bhsd);
        out.poison();
        std::vector<float> lse(size_t(batch * heads * seqlen_q), std::numeric_limits<float>::quiet_NaN());
        fa_combine_params cp;
        fa_combine_params_init(&cp);
        cp.num_splits = splits;
        cp.batch = batch;
        cp.seqlen_q = seqlen_q;
        cp.num_heads = heads;
        cp.head_dim = d;
        cp.out_partial = partial_view;
        cp.out_partial_split_stride = split_stride;
        cp.lse_partial = lse_view;
        cp.lse_partial_split_stride = lse_split_stride;
        cp.dtype = dtype;
        cp.out = out.view();
        cp.lse = fa_lse_view{lse.data(), heads * seqlen_q, seqlen_q, 1};
        ASSERT_EQ(combine_on(backend, cp, partial, partial_lse, out.data(), out.bytes(), lse), FA_OK)
            << fa_last_error();
        const auto expected = reference::combine(make_combine_problem(&cp));
        const std::vector<double> ours = out.canonical();
        ASSERT_EQ(ours.size(), expected.out.size());
        // fp32 arithmetic, then one rounding to the dtype.
        const double rel = dtype == FA_FLOAT32 ? 1e-5 : dtype == FA_BFLOAT16 ? 1.0 / 256 : 1.0 / 2048;
        for (size_t k = 0; k < ours.size(); ++k)
            ASSERT_LE(std::fabs(ours[k] - expected.out[k]), rel * std::max(1.0, std::fabs(expected.out[k])))
                << "out element " << k << ": " << ours[k] << " vs " << expected.out[k];
        for (size_t k = 0; k < lse.size(); ++k) {
            if (std::isinf(expected.lse[k])) {
                EXPECT_EQ(double(lse[k]), expected.lse[k]) << "lse " << k << ": a row with no key is -inf";
            } else {
                EXPECT_NEAR(lse[k], expected.lse[k], 1e-5 * std::max(1.0, std::fabs(expected.lse[k]))) << "lse " << k;
            }
        }
        for (int b = 0; b < batch; ++b) // rows where every split is empty: exactly 0
            for (int h = 0; h < heads; ++h)
                for (int e = 0; e < d; ++e) EXPECT_EQ(out.get(b, 0, h, e), 0.0f);
    }
}

void expect_single_split_is_the_identity(Backend backend) {
    const int batch = 1, seqlen_q = 4, heads = 2, d = 16;
    std::vector<float> partial(static_cast<size_t>(batch * seqlen_q * heads * d)), partial_lse(size_t(batch * heads * seqlen_q));
    for (size_t k = 0; k < partial.size(); ++k) partial[k] = float(k % 13) * 0.25f - 1.0f;
    for (size_t k = 0; k < partial_lse.size(); ++k) partial_lse[k] = float(k) - 3.5f;
    std::vector<float> out(partial.size()), lse(partial_lse.size());
    fa_combine_params cp;
    fa_combine_params_init(&cp);
    cp.batch = batch;
    cp.seqlen_q = seqlen_q;
    cp.num_heads = heads;
    cp.head_dim = d;
    cp.out_partial = fa_tensor{partial.data(), seqlen_q * heads * d, heads * d, d};
    cp.lse_partial = fa_lse_view{partial_lse.data(), heads * seqlen_q, seqlen_q, 1};
    cp.dtype = FA_FLOAT32;
    cp.out = fa_tensor{out.data(), seqlen_q * heads * d, heads * d, d};
    cp.lse = fa_lse_view{lse.data(), heads * seqlen_q, seqlen_q, 1};
    ASSERT_EQ(combine_on(backend, cp, partial, partial_lse, out.data(), out.size() * sizeof(float), lse), FA_OK)
        << fa_last_error();
    EXPECT_EQ(out, partial); // exp(lse - lse) = 1 exactly
    EXPECT_EQ(lse, partial_lse);
}

// A split with a NaN lse (a faulted sequence's, docs/semantics.md) makes its row NaN, out and lse;
// the other rows are merged as usual.
void expect_a_nan_split_makes_its_row_nan(Backend backend) {
    const int splits = 3, seqlen_q = 2, heads = 2, d = 8;
    const int64_t rows = seqlen_q * heads;
    std::vector<float> partial(size_t(splits * rows * d)), partial_lse(size_t(splits * rows));
    for (size_t k = 0; k < partial.size(); ++k) partial[k] = float(k % 7) * 0.5f - 1.5f;
    for (size_t k = 0; k < partial_lse.size(); ++k) partial_lse[k] = float(k % 5) - 2.0f;
    partial_lse[size_t(1 * rows + 3)] = std::numeric_limits<float>::quiet_NaN(); // split 1, row (1, head 1)
    std::vector<float> out(static_cast<size_t>(rows * d)), lse(static_cast<size_t>(rows));
    fa_combine_params cp;
    fa_combine_params_init(&cp);
    cp.num_splits = splits;
    cp.batch = 1;
    cp.seqlen_q = seqlen_q;
    cp.num_heads = heads;
    cp.head_dim = d;
    cp.out_partial = fa_tensor{partial.data(), seqlen_q * heads * d, heads * d, d};
    cp.out_partial_split_stride = rows * d;
    cp.lse_partial = fa_lse_view{partial_lse.data(), heads * seqlen_q, seqlen_q, 1};
    cp.lse_partial_split_stride = rows;
    cp.dtype = FA_FLOAT32;
    cp.out = fa_tensor{out.data(), seqlen_q * heads * d, heads * d, d};
    cp.lse = fa_lse_view{lse.data(), heads * seqlen_q, seqlen_q, 1};
    ASSERT_EQ(combine_on(backend, cp, partial, partial_lse, out.data(), out.size() * sizeof(float), lse), FA_OK)
        << fa_last_error();
    for (int i = 0; i < seqlen_q; ++i)
        for (int h = 0; h < heads; ++h) {
            const bool nan_row = i == 1 && h == 1; // lse index h * seqlen_q + i == 3
            EXPECT_EQ(std::isnan(lse[size_t(h * seqlen_q + i)]), nan_row) << i << " " << h;
            for (int c = 0; c < d; ++c)
                EXPECT_EQ(std::isnan(out[size_t((i * heads + h) * d + c)]), nan_row) << i << " " << h << " " << c;
        }
}

TEST(Combine, ChunkedAttentionCombinesToFullAttention) { expect_chunked_attention_combines_to_full(Backend::cpu); }
TEST(Combine, ANanSplitMakesItsRowNan) { expect_a_nan_split_makes_its_row_nan(Backend::cpu); }
TEST(CudaCombine, ANanSplitMakesItsRowNan) {
    FA_SKIP_IF_UNAVAILABLE(Backend::cuda);
    expect_a_nan_split_makes_its_row_nan(Backend::cuda);
}
TEST(Combine, MatchesReferenceWithEmptySplitsAndStrides) {
    expect_combine_matches_reference_with_empty_splits_and_strides(Backend::cpu);
}
TEST(Combine, SingleSplitIsTheIdentity) { expect_single_split_is_the_identity(Backend::cpu); }

TEST(CudaCombine, ChunkedAttentionCombinesToFullAttention) {
    FA_SKIP_IF_UNAVAILABLE(Backend::cuda);
    expect_chunked_attention_combines_to_full(Backend::cuda);
}
TEST(CudaCombine, MatchesReferenceWithEmptySplitsAndStrides) {
    FA_SKIP_IF_UNAVAILABLE(Backend::cuda);
    expect_combine_matches_reference_with_empty_splits_and_strides(Backend::cuda);
}
TEST(CudaCombine, SingleSplitIsTheIdentity) {
    FA_SKIP_IF_UNAVAILABLE(Backend::cuda);
    expect_single_split_is_the_identity(Backend::cuda);
}

} // namespace
} // namespace flashattn::testing
