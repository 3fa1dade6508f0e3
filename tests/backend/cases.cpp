#include "cases.h"

#include <functional>
#include <map>

namespace flashattn::testing {
namespace {

Case dense(fa_dtype dtype, int batch, int seqlen_q, int seqlen_k, int heads, int heads_k, int head_dim) {
    return dense_case(dtype, batch, seqlen_q, seqlen_k, heads, heads_k, head_dim);
}

using Edit = std::function<void(Case&)>;
Case with(Case c, const Edit& edit) {
    edit(c);
    return c;
}


} // namespace

std::string case_name(const Case& c) {
    Case unnamed = c;
    std::string text = describe(unnamed);
    const std::string suffix = std::string(" ") + backend_name(c.backend);
    if (text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0)
        text.resize(text.size() - suffix.size());
    return sanitize_name(text);
}

std::vector<Case> attention_cases(Backend backend) {
    std::vector<Case> cases;
    const fa_dtype kHalves[] = {FA_FLOAT16, FA_BFLOAT16};
    const fa_dtype kAll[] = {FA_FLOAT16, FA_BFLOAT16, FA_FLOAT32};

    // Head dims, every dtype; the odd ones (1, 40, 59) leave partial vector lanes everywhere.
    for (fa_dtype dt : kAll)
        for (int d : {1, 8, 32, 40, 59, 64, 96, 128, 256}) {
            const int s = d >= 128 ? 80 : 97;
            cases.push_back(dense(dt, 2, s, s, 2, 2, d));
            if (d == 59 || d == 128 || d == 256)
                cases.push_back(with(dense(dt, 2, s - 17, s, 2, 2, d), [](Case& c) { c.causal = true; }));
        }

    // Odd sizes: one row, one key, neither a multiple of any block, seqlen_q above and below seqlen_k.
    for (fa_dtype dt : kHalves)
        for (auto [sq, sk] : {std::pair{1, 1}, {1, 203}, {33, 1}, {113, 203}, {203, 113}, {128, 217}})
            for (bool causal : {false, true})
                cases.push_back(with(dense(dt, 2, sq, sk, 2, 2, dt == FA_FLOAT16 ? 64 : 40),
                                     [causal = causal](Case& c) { c.causal = causal; }));
    cases.push_back(with(dense(FA_FLOAT32, 2, 113, 203, 2, 2, 59), [](Case& c) { c.causal = true; }));
    cases.push_back(with(dense(FA_FLOAT32, 1, 203, 113, 3, 3, 96), [](Case& c) { c.causal = true; }));

    // Each feature alone (alternating dtypes), on sizes that are not block multiples.
    int alternate = 0;
    auto feature = [&](int sq, int sk, int heads, int heads_k, int d, const Edit& edit) {
        const fa_dtype dt = kHalves[alternate++ % 2];
        cases.push_back(with(dense(dt, 2, sq, sk, heads, heads_k, d), edit));
    };
    for (auto [left, right] : {std::pair{32, 0}, {0, 16}, {10, 10}, {-1, 5}, {5, -1}, {0, 0}})
        for (auto [sq, sk] : {std::pair{113, 203}, {203, 113}})
            feature(sq, sk, 2, 2, 64, [l = left, r = right](Case& c) { c.window_left = l; c.window_right = r; });
    feature(113, 203, 2, 2, 64, [](Case& c) { c.causal = true; c.window_left = 24; }); // causal + left window
    for (float cap : {30.0f, 2.5f}) {
        feature(128, 217, 2, 2, 64, [cap](Case& c) { c.softcap = cap; });
        feature(217, 128, 2, 2, 96, [cap](Case& c) { c.softcap = cap; c.causal = true; });
    }
    for (fa_dtype dt : kHalves) {
        cases.push_back(with(dense(dt, 2, 113, 203, 3, 3, 64), [](Case& c) { c.alibi = Alibi::per_head; }));
        cases.push_back(with(dense(dt, 2, 203, 113, 3, 3, 64), [](Case& c) { c.alibi = Alibi::per_head; c.causal = true; }));
        cases.push_back(with(dense(dt, 3, 128, 217, 3, 3, 40), [](Case& c) { c.alibi = Alibi::per_batch_and_head; c.causal = true; }));
        cases.push_back(with(dense(dt, 2, 113, 203, 2, 2, 64), [](Case& c) { c.dropout_p = 0.17f; }));
        cases.push_back(with(dense(dt, 2, 203, 113, 2, 2, 59), [](Case& c) { c.dropout_p = 0.3f; c.causal = true; }));
        cases.push_back(with(dense(dt, 2, 113, 203, 6, 2, 64), [](Case& c) { c.causal = true; }));   // GQA 6:2
        cases.push_back(with(dense(dt, 2, 203, 113, 6, 1, 64), [](Case&) {}));                         // MQA 6:1
        cases.push_back(with(dense(dt, 1, 128, 217, 6, 3, 96), [](Case& c) { c.causal = true; }));   // GQA 6:3
        cases.push_back(with(dense(dt, 2, 97, 131, 2, 2, 64), [](Case& c) { c.softmax_scale = 0.3f; }));
        cases.push_back(with(dense(dt, 2, 113, 203, 2, 2, 64), [](Case& c) { c.seqused_k = {203, 57}; }));
        cases.push_back(with(dense(dt, 2, 113, 203, 2, 2, 64), [](Case& c) { c.seqused_k = {0, 150}; c.causal = true; }));
    }
    for (const Edit& edit : std::vector<Edit>{
             [](Case& c) { c.causal = true; c.softcap = 10.0f; c.alibi = Alibi::per_head; },
             [](Case& c) { c.dropout_p = 0.2f; c.heads = 4; c.heads_k = 2; },
             [](Case& c) { c.window_left = 17; c.window_right = 9; c.heads = 3; c.heads_k = 1; }})
        cases.push_back(with(dense(FA_FLOAT32, 2, 113, 203, 2, 2, 59), edit));

    // Rows that may attend to no key: out 0, lse -inf, dq 0, never NaN.
    cases.push_back(with(dense(FA_FLOAT16, 2, 203, 113, 2, 2, 64), [](Case& c) { c.causal = true; c.window_left = 0; }));
    cases.push_back(with(dense(FA_BFLOAT16, 2, 64, 16, 2, 2, 32), [](Case& c) { c.window_left = 4; c.window_right = 0; }));
    cases.push_back(with(dense(FA_FLOAT16, 2, 40, 90, 2, 2, 32), [](Case& c) { c.window_left = 0; c.window_right = -1; c.seqused_k = {90, 0}; }));
    cases.push_back(with(dense(FA_FLOAT32, 2, 203, 113, 2, 1, 40), [](Case& c) { c.causal = true; c.alibi = Alibi::per_head; }));

    // Nothing to attend to, or nobody asking: out 0 / lse -inf, or dk = dv = 0.
    cases.push_back(dense(FA_FLOAT16, 2, 17, 0, 2, 2, 64));
    cases.push_back(dense(FA_BFLOAT16, 2, 0, 10, 4, 2, 32));
    cases.push_back(dense(FA_FLOAT32, 1, 0, 0, 1, 1, 8));
    // Scales away from the default (negative ones are refused by validation: see bad_inputs_test),
    // and large scores from wide inputs (softmax rows close to one-hot).
    cases.push_back(with(dense(FA_FLOAT16, 2, 70, 90, 2, 2, 64), [](Case& c) { c.softmax_scale = 0.9f; c.causal = true; }));
    cases.push_back(with(dense(FA_FLOAT32, 2, 70, 90, 2, 2, 59), [](Case& c) { c.softmax_scale = 1.0f; }));
    for (fa_dtype dt : kHalves)
        cases.push_back(with(dense(dt, 2, 113, 203, 2, 2, 64), [](Case& c) { c.input_stddev = 4.0; c.causal = true; }));

    // Inputs expanded over the batch (batch_stride 0): any stride is a valid input stride.
    cases.push_back(with(dense(FA_FLOAT16, 3, 65, 129, 4, 2, 64), [](Case& c) { c.kv_batch_broadcast = true; c.causal = true; }));
    cases.push_back(with(dense(FA_BFLOAT16, 3, 129, 65, 4, 4, 40), [](Case& c) { c.kv_batch_broadcast = true; c.layout = Layout::padded; }));

    // Everything at once.
    for (fa_dtype dt : kHalves) {
        cases.push_back(with(dense(dt, 2, 113, 203, 6, 2, 59), [](Case& c) {
            c.causal = true; c.softcap = 20.0f; c.alibi = Alibi::per_head; c.dropout_p = 0.1f; }));
        cases.push_back(with(dense(dt, 2, 203, 113, 6, 2, 96), [](Case& c) {
            c.causal = true; c.softcap = 20.0f; c.alibi = Alibi::per_batch_and_head; c.dropout_p = 0.1f; c.layout = Layout::padded; }));
        cases.push_back(with(dense(dt, 1, 128, 217, 6, 1, 40), [](Case& c) {
            c.window_left = 20; c.window_right = 7; c.softcap = 5.0f; c.alibi = Alibi::per_head; c.layout = Layout::bhsd; }));
        cases.push_back(with(dense(dt, 2, 128, 217, 4, 2, 128), [](Case& c) {
            c.window_left = 50; c.window_right = 0; c.dropout_p = 0.25f; c.seqused_k = {217, 100}; c.layout = Layout::padded; }));
    }

    // Strided layouts.
    for (fa_dtype dt : kAll)
        for (Layout layout : {Layout::bhsd, Layout::padded})
            cases.push_back(with(dense(dt, 2, 77, 91, 4, 2, 64), [layout = layout](Case& c) { c.causal = true; c.layout = layout; }));

    // Forward without softmax_lse (it is optional there).
    cases.push_back(with(dense(FA_BFLOAT16, 2, 65, 65, 2, 2, 64), [](Case& c) { c.with_lse = false; c.causal = true; }));

    // A few larger problems.
    cases.push_back(with(dense(FA_FLOAT16, 2, 512, 512, 4, 4, 128), [](Case& c) { c.causal = true; }));
    cases.push_back(with(dense(FA_BFLOAT16, 1, 384, 640, 4, 1, 64), [](Case& c) { c.dropout_p = 0.1f; c.alibi = Alibi::per_head; }));
    cases.push_back(with(dense(FA_FLOAT32, 1, 256, 300, 2, 2, 256), [](Case& c) { c.causal = true; c.softcap = 30.0f; }));
    return named_cases(cases, backend);
}

std::vector<Case> varlen_cases(Backend backend) {
    std::vector<Case> cases;
    auto packed = [](fa_dtype dtype, std::vector<int> q_lens, std::vector<int> k_lens, int heads, int heads_k, int d) {
        Case c;
        c.dtype = dtype;
        c.varlen = true;
        c.q_lens = std::move(q_lens);
        c.k_lens = std::move(k_lens);
        c.heads = heads;
        c.heads_k = heads_k;
        c.head_dim = d;
        return c;
    };
    const std::vector<int> q_lens{37, 0, 1, 128, 77, 9}, k_lens{53, 11, 0, 97, 201, 9};
    for (fa_dtype dt : {FA_FLOAT16, FA_BFLOAT16, FA_FLOAT32}) {
        cases.push_back(packed(dt, q_lens, k_lens, 2, 2, 64));
        cases.push_back(with(packed(dt, q_lens, k_lens, 4, 2, 59), [](Case& c) { c.causal = true; }));
    }
    for (fa_dtype dt : {FA_FLOAT16, FA_BFLOAT16}) {
        cases.push_back(with(packed(dt, q_lens, k_lens, 6, 2, 40), [](Case& c) {
            c.seqused_k = {20, 11, 0, 97, 0, 4}; c.causal = true; }));
        cases.push_back(with(packed(dt, q_lens, k_lens, 2, 2, 96), [](Case& c) {
            c.spare_rows = 5; c.window_left = 16; c.window_right = 3; c.layout = Layout::padded; }));
        cases.push_back(with(packed(dt, q_lens, k_lens, 3, 3, 64), [](Case& c) {
            c.alibi = Alibi::per_batch_and_head; c.softcap = 15.0f; c.causal = true; }));
        cases.push_back(with(packed(dt, q_lens, k_lens, 4, 1, 64), [](Case& c) {
            c.dropout_p = 0.15f; c.causal = true; c.layout = Layout::bhsd; }));
        cases.push_back(with(packed(dt, {1, 1, 1, 1}, {300, 1, 0, 77}, 4, 4, 128), [](Case&) {})); // decode-like
        cases.push_back(with(packed(dt, {0, 0}, {5, 0}, 2, 2, 32), [](Case&) {}));                  // nothing to do
    }
    cases.push_back(with(packed(FA_FLOAT32, q_lens, k_lens, 6, 3, 256), [](Case& c) {
        c.causal = true; c.softcap = 8.0f; c.alibi = Alibi::per_head; c.dropout_p = 0.2f; c.seqused_k = {53, 2, 0, 50, 150, 9}; }));
    return named_cases(cases, backend);
}

Case dense_case(fa_dtype dtype, int batch, int seqlen_q, int seqlen_k, int heads, int heads_k, int head_dim) {
    Case c;
    c.dtype = dtype;
    c.batch = batch;
    c.seqlen_q = seqlen_q;
    c.seqlen_k = seqlen_k;
    c.heads = heads;
    c.heads_k = heads_k;
    c.head_dim = head_dim;
    return c;
}

std::vector<Case> named_cases(std::vector<Case> cases, Backend backend) {
    std::vector<Case> kept;
    std::map<std::string, int> seen;
    for (Case c : cases) {
        if (backend == Backend::cuda && c.dtype == FA_FLOAT32) continue;
        c.backend = backend;
        std::string name = case_name(c);
        if (int n = seen[name]++) name += "_" + std::to_string(n + 1);
        c.name = name;
        c.seed = seed_from(name);
        kept.push_back(c);
    }
    return kept;
}

} // namespace flashattn::testing
