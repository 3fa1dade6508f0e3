#include "kvcache.h"

#include "checker.h"
#include "errors.h"
#include "json.h"
#include "report.h"
#include "workload.h"

#include "core/dtype.h"
#include "core/problem.h"
#include "reference/reference.h"

#include <flashattn/flashattn.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <numeric>
#include <optional>
#include <random>

namespace flashattn::cli {
namespace {

// The host inputs of one decode step. Caches are contiguous (batch, capacity, kv_heads, head_dim),
// or a pool of pages (num_blocks, page_size, kv_heads, head_dim) with a shuffled block table.
struct KvWorkload {
    ProblemSpec spec;
    int capacity = 0;   // rows a sequence's cache holds: seqlen_k + seqlen_q
    int max_blocks = 0, num_blocks = 0;
    HostTensor q, k_new, v_new, k_cache, v_cache;
    std::vector<int32_t> cache_seqlens, block_table;
    std::vector<unsigned char> rotary_cos, rotary_sin;
    std::vector<float> alibi_slopes, learnable_sink;
};

KvWorkload make_kv_workload(const ProblemSpec& s) {
    KvWorkload w;
    w.spec = s;
    w.capacity = s.seqlen_k + s.seqlen_q;
    const int64_t d = s.head_dim, dv = value_head_dim(s);
    const double cache_bytes = double(s.batch) * w.capacity * s.kv_heads * (d + dv) * dtype_size(s.dtype);
    if (cache_bytes > 64.0 * (1ull << 30))
        throw UsageError("--kvcache: the caches would need more than 64 GiB; reduce --batch or --seqlen-k");
    w.q = HostTensor(s.dtype, int64_t(s.batch) * s.seqlen_q, s.heads, d);
    w.k_new = HostTensor(s.dtype, int64_t(s.batch) * s.seqlen_q, s.kv_heads, d);
    w.v_new = HostTensor(s.dtype, int64_t(s.batch) * s.seqlen_q, s.kv_heads, dv);
    fill_normal(w.q, s.seed, 21);
    fill_normal(w.k_new, s.seed, 22);
    fill_normal(w.v_new, s.seed, 23);
    int64_t cache_rows = int64_t(s.batch) * w.capacity;
    if (s.paged) {
        w.max_blocks = (w.capacity + s.page_size - 1) / s.page_size;
        w.num_blocks = s.batch * w.max_blocks;
        cache_rows = int64_t(w.num_blocks) * s.page_size;
        w.block_table.resize(size_t(w.num_blocks));
        std::iota(w.block_table.begin(), w.block_table.end(), 0);
        std::shuffle(w.block_table.begin(), w.block_table.end(), std::mt19937_64(s.seed)); // scattered pages
    }
    w.k_cache = HostTensor(s.dtype, cache_rows, s.kv_heads, d);
    w.v_cache = HostTensor(s.dtype, cache_rows, s.kv_heads, dv);
    fill_normal(w.k_cache, s.seed, 24);
    fill_normal(w.v_cache, s.seed, 25);
    w.cache_seqlens.assign(size_t(s.batch), s.seqlen_k);
    if (s.rotary_dim) {
        const int half = s.rotary_dim / 2;
        w.rotary_cos.assign(size_t(w.capacity) * half * dtype_size(s.dtype), 0);
        w.rotary_sin = w.rotary_cos;
        for (int pos = 0; pos < w.capacity; ++pos)
            for (int t = 0; t < half; ++t) {
                const double angle = pos * std::pow(10000.0, -2.0 * t / s.rotary_dim);
                store_float(w.rotary_cos.data(), s.dtype, int64_t(pos) * half + t, float(std::cos(angle)));
                store_float(w.rotary_sin.data(), s.dtype, int64_t(pos) * half + t, float(std::sin(angle)));
            }
    }
    if (s.alibi)
        for (int h = 0; h < s.heads; ++h) w.alibi_slopes.push_back(std::exp2(-8.0f * float(h + 1) / s.heads));
    if (s.learnable_sink) w.learnable_sink = random_sinks(s, 26);
    return w;
}

// Where one copy of the workload lives.
struct KvBindings {
    void *q, *k_new, *v_new, *k_cache, *v_cache, *out;
    float* lse;
    const int32_t *cache_seqlens, *block_table;
    const void *rotary_cos, *rotary_sin;
    const float* alibi_slopes;
    const float* learnable_sink;
};

fa_kvcache_params kv_params(const KvWorkload& w, const KvBindings& at, fa_backend backend) {
    const ProblemSpec& s = w.spec;
    auto view = [&](void* data, int64_t rows_per_batch, int64_t heads, int64_t d) {
        return fa_tensor{data, rows_per_batch * heads * d, heads * d, d};
    };
    const int64_t d = s.head_dim, dv = value_head_dim(s);
    fa_kvcache_params p;
    fa_kvcache_params_init(&p);
    fa_fwd_params& f = p.fwd;
    f.dtype = s.dtype;
    f.batch = s.batch;
    f.seqlen_q = s.seqlen_q;
    f.seqlen_k = w.capacity;
    f.num_heads = s.heads;
    f.num_heads_k = s.kv_heads;
    f.head_dim = s.head_dim;
    f.head_dim_v = s.head_dim_v;
    f.learnable_sink = at.learnable_sink;
    f.q = view(at.q, s.seqlen_q, s.heads, d);
    f.out = view(at.out, s.seqlen_q, s.heads, dv);
    f.k = view(at.k_cache, s.paged ? s.page_size : w.capacity, s.kv_heads, d);
    f.v = view(at.v_cache, s.paged ? s.page_size : w.capacity, s.kv_heads, dv);
    f.softmax_lse = at.lse;
    f.softmax_scale = s.scale;
    f.causal = s.causal;
    f.window_left = s.window_left;
    f.window_right = s.window_right;
    f.softcap = s.softcap;
    f.alibi_slopes = at.alibi_slopes;
    f.num_splits = s.num_splits;
    f.backend = backend;
    if (s.paged) {
        f.block_table = at.block_table;
        f.block_table_batch_stride = w.max_blocks;
        f.max_blocks_per_seq = w.max_blocks;
        f.page_size = s.page_size;
        f.num_blocks = w.num_blocks;
    }
    p.batch_cache = s.batch;
    p.cache_seqlens = at.cache_seqlens;
    p.k_new = view(at.k_new, s.seqlen_q, s.kv_heads, d);
    p.v_new = view(at.v_new, s.seqlen_q, s.kv_heads, dv);
    p.seqlen_new = s.seqlen_q;
    if (s.rotary_dim) {
        p.rotary_cos = at.rotary_cos;
        p.rotary_sin = at.rotary_sin;
        p.rotary_dim = s.rotary_dim;
        p.seqlen_rotary = w.capacity;
        p.rotary_interleaved = s.rotary_interleaved;
    }
    return p;
}

template <typename T>
T* data_or_null(std::vector<T>& v) { return v.empty() ? nullptr : v.data(); }

struct KvOutputs {
    HostTensor out, k_cache, v_cache;
    std::vector<float> lse;
};

// warmup + iters calls on the device; every call appends the same rows again (idempotent), so the
// caches after the last call are those after one step.
Timing run_kv(const KvWorkload& w, KvOutputs& result, Device& device, const Options& options, Progress& progress) {
    auto upload = [&](const void* host, size_t bytes) {
        DeviceBuffer buffer(device, bytes);
        if (bytes > 0) device.upload(buffer.get(), host, bytes);
        return buffer;
    };
    auto bytes = [](const auto& v) { return v.size() * sizeof(v[0]); };
    DeviceBuffer q = upload(w.q.bytes.data(), w.q.bytes.size());
    DeviceBuffer k_new = upload(w.k_new.bytes.data(), w.k_new.bytes.size());
    DeviceBuffer v_new = upload(w.v_new.bytes.data(), w.v_new.bytes.size());
    DeviceBuffer k_cache = upload(w.k_cache.bytes.data(), w.k_cache.bytes.size());
    DeviceBuffer v_cache = upload(w.v_cache.bytes.data(), w.v_cache.bytes.size());
    DeviceBuffer seqlens = upload(w.cache_seqlens.data(), bytes(w.cache_seqlens));
    DeviceBuffer table = upload(w.block_table.data(), bytes(w.block_table));
    DeviceBuffer cos = upload(w.rotary_cos.data(), w.rotary_cos.size());
    DeviceBuffer sin = upload(w.rotary_sin.data(), w.rotary_sin.size());
    DeviceBuffer alibi = upload(w.alibi_slopes.data(), bytes(w.alibi_slopes));
    DeviceBuffer sink = upload(w.learnable_sink.data(), bytes(w.learnable_sink));
    const int64_t out_elements = w.q.rows * w.spec.heads * value_head_dim(w.spec);
    DeviceBuffer out(device, size_t(out_elements * dtype_size(w.spec.dtype)));
    DeviceBuffer lse(device, size_t(w.spec.batch) * w.spec.heads * w.spec.seqlen_q * sizeof(float));
    const KvBindings at{q.get(), k_new.get(), v_new.get(), k_cache.get(), v_cache.get(), out.get(), lse.get<float>(),
                        seqlens.get<const int32_t>(), table.get<const int32_t>(), cos.get(), sin.get(),
                        alibi.get<const float>(), sink.get<const float>()};
    fa_kvcache_params params = kv_params(w, at, device.backend());
    // The scratch a call needs (split-KV's partials, the rotated q) in one buffer of ours, as a
    // serving loop would keep it: the library then allocates nothing per call.
    DeviceBuffer workspace(device, fa_kvcache_workspace_size(&params));
    params.workspace = workspace.get();
    params.workspace_size = workspace.bytes();

    Timing timing;
    progress.begin("kvcache iterations", options.warmup + options.iters);
    for (int i = 0; i < options.warmup + options.iters; ++i) {
        fa_status status = FA_OK;
        const double ms = device.time_ms([&] { status = fa_kvcache_forward(&params); });
        if (status != FA_OK)
            throw Error(status, std::string("fa_kvcache_forward failed: ") + fa_status_name(status) + ": " + fa_last_error());
        if (i >= options.warmup) timing.ms.push_back(ms);
        progress.advance(i + 1);
    }
    progress.end();
    result.out = HostTensor(w.spec.dtype, w.q.rows, w.spec.heads, value_head_dim(w.spec));
    result.k_cache = w.k_cache;
    result.v_cache = w.v_cache;
    result.lse.assign(lse.bytes() / sizeof(float), 0.0f);
    device.download(result.out.bytes.data(), out.get(), out.bytes());
    device.download(result.k_cache.bytes.data(), k_cache.get(), k_cache.bytes());
    device.download(result.v_cache.bytes.data(), v_cache.get(), v_cache.bytes());
    device.download(result.lse.data(), lse.get(), lse.bytes());
    return timing;
}

KvBindings host_bindings(KvWorkload& w, HostTensor& k_cache, HostTensor& v_cache, HostTensor& out,
                         std::vector<float>& lse) {
    return KvBindings{w.q.bytes.data(), w.k_new.bytes.data(), w.v_new.bytes.data(), k_cache.bytes.data(),
                      v_cache.bytes.data(), out.bytes.data(), lse.data(), w.cache_seqlens.data(),
                      data_or_null(w.block_table), data_or_null(w.rotary_cos), data_or_null(w.rotary_sin),
                      data_or_null(w.alibi_slopes), data_or_null(w.learnable_sink)};
}

// Bit-exact comparison of a cache with the reference's; error = the largest elementwise difference.
TensorCheck exact_check(const char* name, const HostTensor& ours, const HostTensor& expected) {
    TensorCheck check{name, 0.0, 0.0, 0.0, ours.bytes == expected.bytes};
    for (int64_t i = 0; i < ours.elements(); ++i) {
        const double a = ours.value(i), b = expected.value(i);
        if (a != b && !(std::isnan(a) && std::isnan(b))) check.error = std::max(check.error, std::isnan(a - b) ? INFINITY : std::fabs(a - b));
    }
    return check;
}

CheckResult check_kv(KvWorkload& w, const KvOutputs& ours, Progress& progress) {
    using reference::Precision;
    const auto started = std::chrono::steady_clock::now();
    HostTensor k_cache = w.k_cache, v_cache = w.v_cache, out_unused = ours.out;
    std::vector<float> lse_unused = ours.lse;
    const fa_kvcache_params params =
        kv_params(w, host_bindings(w, k_cache, v_cache, out_unused, lse_unused), FA_BACKEND_CPU);
    const KvCacheProblem problem = make_kvcache_problem(&params);
    progress.begin("reference 1/2: fp64 forward");
    const reference::ForwardResult exact = reference::kvcache_forward(problem, Precision::fp64);
    progress.begin(std::string("reference 2/2: naive ") + dtype_flag_name(w.spec.dtype) + " forward");
    const reference::ForwardResult naive = reference::kvcache_forward(problem, Precision::same_as_inputs);
    progress.end();
    CheckResult result;
    result.tensors.push_back(compare_values("out", 2.0, size_t(ours.out.elements()),
                                            [&](size_t i) { return double(ours.out.value(int64_t(i))); }, naive.out,
                                            exact.out));
    result.tensors.push_back(compare_values("lse", 2.0, ours.lse.size(), [&](size_t i) { return double(ours.lse[i]); },
                                            naive.lse, exact.lse));
    result.tensors.push_back(exact_check("k_cache", ours.k_cache, k_cache));
    result.tensors.push_back(exact_check("v_cache", ours.v_cache, v_cache));
    for (const TensorCheck& t : result.tensors) result.pass = result.pass && t.pass;
    result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    return result;
}

std::string describe_kv(const ProblemSpec& s) {
    std::string text = describe_problem(s);
    char extra[160];
    std::snprintf(extra, sizeof extra, " kvcache(new %d, cached %d)", s.seqlen_q, s.seqlen_k);
    text += extra;
    if (s.paged) text += " paged(page " + std::to_string(s.page_size) + ")";
    if (s.rotary_dim) text += " rotary=" + std::to_string(s.rotary_dim) + (s.rotary_interleaved ? " interleaved" : "");
    text += " num_splits=" + std::to_string(s.num_splits);
    return text;
}

} // namespace

int run_kvcache(const Options& options, Device& device, Progress& progress) {
    const ProblemSpec& s = options.problem;
    KvWorkload w = make_kv_workload(s);
    KvOutputs ours;
    const Timing timing = run_kv(w, ours, device, options, progress);

    // K and V bytes the attention reads: every cached and appended row, once per KV head.
    const double kv_bytes = double(s.batch) * double(s.seqlen_k + s.seqlen_q) * s.kv_heads * (s.head_dim + value_head_dim(s)) *
                            dtype_size(s.dtype);
    const double gbps = timing.median_ms() > 0 ? kv_bytes / (timing.median_ms() * 1e-3) / 1e9 : 0.0;
    const double reference_work = double(s.batch) * s.heads * s.seqlen_q * double(w.capacity) * s.head_dim;
    const bool check = options.check == CheckMode::on || (options.check == CheckMode::automatic && reference_work <= 1.1e9);
    std::optional<CheckResult> result;
    std::string note = options.check == CheckMode::off ? "skipped (--no-check)"
                                                       : "skipped: too large for the naive reference (force it with --check)";
    if (check) {
        try {
            result = check_kv(w, ours, progress);
        } catch (const std::exception& e) {
            progress.end();
            note = std::string("could not run the fp64 reference: ") + e.what();
        }
    }
    const bool failed = (result && !result->pass) || (!result && options.check == CheckMode::on);

    if (options.json) {
        JsonObject json;
        json.string("tool", "flashattn-cli").string("mode", "kvcache").string("version", fa_version_string());
        json.string("device", device.description()).string("dtype", dtype_flag_name(s.dtype));
        json.integer("batch", s.batch).integer("seqlen_new", s.seqlen_q).integer("cache_seqlen", s.seqlen_k);
        json.integer("heads", s.heads).integer("kv_heads", s.kv_heads).integer("head_dim", s.head_dim);
        json.integer("head_dim_v", value_head_dim(s)).boolean("learnable_sink", s.learnable_sink);
        json.boolean("paged", s.paged).integer("page_size", s.paged ? s.page_size : 0).integer("rotary_dim", s.rotary_dim);
        json.boolean("causal", s.causal).integer("num_splits", s.num_splits);
        json.number("fwd_ms", timing.median_ms()).number("fwd_min_ms", timing.min_ms()).number("kv_bytes", kv_bytes);
        json.number("kv_gbps", gbps).string("check", result ? (result->pass ? "pass" : "fail") : "skipped");
        if (result) {
            JsonObject errors;
            for (const TensorCheck& t : result->tensors) {
                JsonObject one;
                one.number("error", t.error).number("naive_error", t.naive_error).number("bound", t.bound);
                errors.raw(t.name, one.boolean("pass", t.pass).str());
            }
            json.raw("errors", errors.str());
        } else {
            json.string("check_note", note);
        }
        std::cout << json.string("result", failed ? "fail" : "pass").str() << std::endl;
    } else {
        std::cout << "flashattn " << fa_version_string() << "  backend: " << device.description() << "\n";
        std::cout << "problem   " << describe_kv(s) << "  seed=" << s.seed << "\n";
        char line[256];
        std::snprintf(line, sizeof line, "kvcache   %10.3f ms median of %zu (min %.3f)  K/V read %.3f GB -> %.2f GB/s\n",
                      timing.median_ms(), timing.ms.size(), timing.min_ms(), kv_bytes / 1e9, gbps);
        std::cout << line;
        if (result) {
            std::snprintf(line, sizeof line,
                          "check     against the fp64 reference (%.1f s); out, lse: bound = 2x the naive %s error + 1e-5;"
                          " caches: bit-exact\n", result->seconds, dtype_flag_name(s.dtype));
            std::cout << line;
            for (const TensorCheck& t : result->tensors) {
                std::snprintf(line, sizeof line, "  %-7s max|ours - ref| %.3e   bound %.3e   %s\n", t.name.c_str(),
                              t.error, t.bound, t.pass ? "PASS" : "FAIL");
                std::cout << line;
            }
        } else {
            std::cout << "check     " << note << "\n";
        }
        std::cout << "result    " << (failed ? "FAIL" : result ? "PASS" : "PASS (not checked)") << std::endl;
    }
    return failed ? kExitFailure : kExitSuccess;
}

} // namespace flashattn::cli
