#include "workload.h"

#include "errors.h"

#include "core/dtype.h"

#include <cmath>
#include <cstdio>
#include <new>
#include <string>
#include <unistd.h>

namespace flashattn::cli {
namespace {

// splitmix64: a counter-based stream, so each tensor's data depends only on (seed, tensor), not on
// the order tensors are built in.
uint64_t splitmix64(uint64_t& state) {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double uniform_open01(uint64_t& state) { return (double(splitmix64(state) >> 11) + 0.5) * 0x1.0p-53; }

// Random lengths in [0, max_len], about one sequence in four empty, as prefix sums.
std::vector<int32_t> random_prefix_sums(int batch, int max_len, uint64_t seed, uint64_t stream) {
    uint64_t state = seed * 0x2545F4914F6CDD1Dull + stream;
    std::vector<int32_t> cu{0};
    int64_t total = 0;
    for (int b = 0; b < batch; ++b) {
        const bool empty = max_len == 0 || splitmix64(state) % 4 == 0;
        const int64_t len = empty ? 0 : 1 + int64_t(splitmix64(state) % uint64_t(max_len));
        total += len;
        if (total > INT32_MAX) throw UsageError("--varlen: --batch x --seqlen exceeds the int32 range of cu_seqlens");
        cu.push_back(int32_t(total));
    }
    return cu;
}

// Refuse up front what cannot fit (inputs and outputs, a host and a device-side copy of each), rather
// than let the system kill the process half-way through filling buffers.
void require_fits_in_memory(const ProblemSpec& s, bool with_backward) {
    const double q_elements = double(s.batch) * s.seqlen_q * s.heads * (s.head_dim + value_head_dim(s)) / 2;
    const double kv_elements = double(s.batch) * s.seqlen_k * s.kv_heads * (s.head_dim + value_head_dim(s)) / 2;
    const double per_copy = (2 * q_elements + 2 * kv_elements) * (with_backward ? 2 : 1) * dtype_size(s.dtype);
    const double needed = 2 * per_copy;
    const double available = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
    if (available > 0 && needed > 0.8 * available) {
        char message[256];
        std::snprintf(message, sizeof message,
                      "the problem needs about %.1f GiB of host memory, this machine has %.1f GiB; reduce --batch, "
                      "--seqlen or --heads",
                      needed / (1ull << 30), available / (1ull << 30));
        throw UsageError(message);
    }
}

HostTensor allocate(const char* name, fa_dtype dtype, int64_t rows, int64_t heads, int64_t head_dim) {
    try {
        return HostTensor(dtype, rows, heads, head_dim);
    } catch (const std::bad_alloc&) {
        const double gib = double(rows) * heads * head_dim * dtype_size(dtype) / (1ull << 30);
        throw UsageError("not enough host memory for " + std::string(name) + " (" + std::to_string(gib) +
                         " GiB); reduce --batch, --seqlen or --heads");
    }
}

fa_tensor contiguous_view(void* data, int64_t rows_per_batch, int64_t heads, int64_t head_dim) {
    return fa_tensor{data, rows_per_batch * heads * head_dim, heads * head_dim, head_dim};
}

} // namespace

// Standard normal values (like torch.randn), rounded to the tensor's dtype.
void fill_normal(HostTensor& t, uint64_t seed, uint64_t stream) {
    uint64_t state = seed * 0x2545F4914F6CDD1Dull + stream;
    const double two_pi = 6.283185307179586;
    for (int64_t i = 0; i < t.elements(); i += 2) {
        const double radius = std::sqrt(-2.0 * std::log(uniform_open01(state)));
        const double angle = two_pi * uniform_open01(state);
        store_float(t.bytes.data(), t.dtype, i, float(radius * std::cos(angle)));
        if (i + 1 < t.elements()) store_float(t.bytes.data(), t.dtype, i + 1, float(radius * std::sin(angle)));
    }
}

std::vector<float> random_sinks(const ProblemSpec& s, uint64_t stream) {
    HostTensor values(FA_FLOAT32, 1, s.heads, 1);
    fill_normal(values, s.seed, stream);
    std::vector<float> sinks(size_t(s.heads));
    for (int h = 0; h < s.heads; ++h) sinks[size_t(h)] = values.value(h);
    return sinks;
}

HostTensor::HostTensor(fa_dtype dtype_, int64_t rows_, int64_t heads_, int64_t head_dim_)
    : dtype(dtype_), rows(rows_), heads(heads_), head_dim(head_dim_),
      bytes(size_t(rows_ * heads_ * head_dim_ * dtype_size(dtype_))) {}

float HostTensor::value(int64_t index) const { return load_float(bytes.data(), dtype, index); }

Workload make_workload(const ProblemSpec& spec, bool with_backward) {
    require_fits_in_memory(spec, with_backward);
    Workload work;
    work.spec = spec;
    if (spec.varlen) {
        work.cu_seqlens_q = random_prefix_sums(spec.batch, spec.seqlen_q, spec.seed, 1);
        work.cu_seqlens_k = random_prefix_sums(spec.batch, spec.seqlen_k, spec.seed, 2);
        work.q_rows = work.cu_seqlens_q.back();
        work.k_rows = work.cu_seqlens_k.back();
        work.lse_elements = int64_t(spec.heads) * work.q_rows;
    } else {
        work.q_rows = int64_t(spec.batch) * spec.seqlen_q;
        work.k_rows = int64_t(spec.batch) * spec.seqlen_k;
        work.lse_elements = int64_t(spec.batch) * spec.heads * spec.seqlen_q;
    }
    work.q = allocate("q", spec.dtype, work.q_rows, spec.heads, spec.head_dim);
    work.k = allocate("k", spec.dtype, work.k_rows, spec.kv_heads, spec.head_dim);
    work.v = allocate("v", spec.dtype, work.k_rows, spec.kv_heads, value_head_dim(spec));
    fill_normal(work.q, spec.seed, 11);
    fill_normal(work.k, spec.seed, 12);
    fill_normal(work.v, spec.seed, 13);
    if (with_backward) {
        work.dout = allocate("dout", spec.dtype, work.q_rows, spec.heads, value_head_dim(spec));
        fill_normal(work.dout, spec.seed, 14);
    }
    if (spec.learnable_sink) work.learnable_sink = random_sinks(spec, 15);
    if (spec.alibi)
        for (int h = 0; h < spec.heads; ++h) work.alibi_slopes.push_back(std::exp2(-8.0f * float(h + 1) / spec.heads));
    return work;
}

Outputs make_outputs(const Workload& work, bool with_backward) {
    const ProblemSpec& s = work.spec;
    Outputs outputs;
    outputs.out = allocate("out", s.dtype, work.q_rows, s.heads, value_head_dim(s));
    outputs.lse.assign(size_t(work.lse_elements), 0.0f);
    if (with_backward) {
        outputs.dq = allocate("dq", s.dtype, work.q_rows, s.heads, s.head_dim);
        outputs.dk = allocate("dk", s.dtype, work.k_rows, s.kv_heads, s.head_dim);
        outputs.dv = allocate("dv", s.dtype, work.k_rows, s.kv_heads, value_head_dim(s));
        if (s.learnable_sink) outputs.dsink.assign(size_t(s.heads), 0.0f);
    }
    return outputs;
}

Bindings host_bindings(Workload& work, Outputs& outputs) {
    auto data = [](HostTensor& t) -> void* { return t.bytes.empty() ? nullptr : t.bytes.data(); };
    Bindings at;
    at.q = data(work.q);
    at.k = data(work.k);
    at.v = data(work.v);
    at.out = data(outputs.out);
    at.lse = outputs.lse.empty() ? nullptr : outputs.lse.data();
    at.cu_seqlens_q = work.cu_seqlens_q.empty() ? nullptr : work.cu_seqlens_q.data();
    at.cu_seqlens_k = work.cu_seqlens_k.empty() ? nullptr : work.cu_seqlens_k.data();
    at.alibi_slopes = work.alibi_slopes.empty() ? nullptr : work.alibi_slopes.data();
    at.dout = data(work.dout);
    at.dq = data(outputs.dq);
    at.dk = data(outputs.dk);
    at.dv = data(outputs.dv);
    at.learnable_sink = work.learnable_sink.empty() ? nullptr : work.learnable_sink.data();
    at.dsink = outputs.dsink.empty() ? nullptr : outputs.dsink.data();
    return at;
}

fa_fwd_params forward_params(const Workload& work, const Bindings& at, fa_backend backend) {
    const ProblemSpec& s = work.spec;
    fa_fwd_params p;
    fa_fwd_params_init(&p);
    p.dtype = s.dtype;
    p.batch = s.batch;
    p.seqlen_q = s.seqlen_q;
    p.seqlen_k = s.seqlen_k;
    p.num_heads = s.heads;
    p.num_heads_k = s.kv_heads;
    p.head_dim = s.head_dim;
    p.head_dim_v = s.head_dim_v;
    p.learnable_sink = at.learnable_sink;
    // Varlen tensors are packed along the rows; batch_stride is ignored there.
    const int64_t q_rows_per_batch = s.varlen ? 0 : s.seqlen_q;
    const int64_t k_rows_per_batch = s.varlen ? 0 : s.seqlen_k;
    p.q = contiguous_view(at.q, q_rows_per_batch, s.heads, s.head_dim);
    p.k = contiguous_view(at.k, k_rows_per_batch, s.kv_heads, s.head_dim);
    p.v = contiguous_view(at.v, k_rows_per_batch, s.kv_heads, value_head_dim(s));
    p.out = contiguous_view(at.out, q_rows_per_batch, s.heads, value_head_dim(s));
    p.softmax_lse = at.lse;
    if (s.varlen) {
        p.cu_seqlens_q = at.cu_seqlens_q;
        p.cu_seqlens_k = at.cu_seqlens_k;
        p.total_q = work.q_rows;
        p.total_k = work.k_rows;
    }
    p.softmax_scale = s.scale;
    p.causal = s.causal ? 1 : 0;
    p.window_left = s.window_left;
    p.window_right = s.window_right;
    p.softcap = s.softcap;
    p.alibi_slopes = at.alibi_slopes;
    p.dropout_p = s.dropout;
    p.rng_seed = s.seed;
    p.rng_offset = 0;
    p.num_splits = s.num_splits;
    p.backend = backend;
    return p;
}

fa_bwd_params backward_params(const Workload& work, const Bindings& at, fa_backend backend, bool deterministic) {
    const ProblemSpec& s = work.spec;
    fa_bwd_params p;
    fa_bwd_params_init(&p);
    p.fwd = forward_params(work, at, backend);
    const int64_t q_rows_per_batch = s.varlen ? 0 : s.seqlen_q;
    const int64_t k_rows_per_batch = s.varlen ? 0 : s.seqlen_k;
    p.dout = contiguous_view(at.dout, q_rows_per_batch, s.heads, value_head_dim(s));
    p.dq = contiguous_view(at.dq, q_rows_per_batch, s.heads, s.head_dim);
    p.dk = contiguous_view(at.dk, k_rows_per_batch, s.kv_heads, s.head_dim);
    p.dv = contiguous_view(at.dv, k_rows_per_batch, s.kv_heads, value_head_dim(s));
    p.dsink = at.dsink;
    p.deterministic = deterministic ? 1 : 0;
    return p;
}

Problem host_problem(const Workload& work, const Bindings& host) {
    const fa_fwd_params params = forward_params(work, host, FA_BACKEND_CPU);
    Problem problem = make_problem(&params, work.spec.varlen);
    check_sequence_arrays(problem);
    return problem;
}

int64_t allowed_pairs(const Problem& problem) {
    int64_t pairs = 0;
    for (int64_t b = 0; b < problem.batch(); ++b) {
        const Span span = problem.span(b);
        for (int64_t i = 0; i < span.q_len; ++i) {
            const KeyRange keys = problem.mask.keys_for_row(i, span.q_len, span.k_len);
            if (!keys.empty()) pairs += keys.end - keys.begin;
        }
    }
    return pairs * problem.heads();
}

} // namespace flashattn::cli
