#include "test_support.h"

#include "core/dtype.h"
#include "device_memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <limits>
#include <numeric>
#include <sstream>

namespace flashattn::testing {

const char* backend_name(Backend backend) { return backend == Backend::cpu ? "cpu" : "cuda"; }
fa_backend to_fa_backend(Backend backend) { return backend == Backend::cpu ? FA_BACKEND_CPU : FA_BACKEND_CUDA; }

const char* layout_name(Layout layout) {
    switch (layout) {
        case Layout::bshd: return "bshd";
        case Layout::bhsd: return "bhsd";
        case Layout::padded: return "padded";
    }
    return "?";
}

const char* dtype_short(fa_dtype dtype) {
    switch (dtype) {
        case FA_FLOAT16: return "fp16";
        case FA_BFLOAT16: return "bf16";
        case FA_FLOAT32: return "fp32";
    }
    return "?";
}

// ---------------------------------------------------------------------------------------------
// Tensor

namespace {

// Two different NaNs: one in every element an output must overwrite, one in every gap that nothing
// may touch (and that no input read may let leak into a result).
uint32_t poison_bits(fa_dtype dtype) {
    return dtype == FA_FLOAT16 ? 0x7E00u : dtype == FA_BFLOAT16 ? 0x7FC0u : 0x7FC00000u;
}
uint32_t sentinel_bits(fa_dtype dtype) {
    return dtype == FA_FLOAT16 ? 0x7E5Au : dtype == FA_BFLOAT16 ? 0x7FA5u : 0x7FC0A5A5u;
}

void put_bits(unsigned char* base, fa_dtype dtype, int64_t index, uint32_t bits) {
    if (dtype == FA_FLOAT32) {
        std::memcpy(base + index * 4, &bits, 4);
    } else {
        const uint16_t half = static_cast<uint16_t>(bits);
        std::memcpy(base + index * 2, &half, 2);
    }
}
uint32_t get_bits(const unsigned char* base, fa_dtype dtype, int64_t index) {
    if (dtype == FA_FLOAT32) {
        uint32_t bits;
        std::memcpy(&bits, base + index * 4, 4);
        return bits;
    }
    uint16_t half;
    std::memcpy(&half, base + index * 2, 2);
    return half;
}

} // namespace

Tensor::Tensor(fa_dtype dtype, int64_t batch, int64_t rows, int64_t heads, int64_t dim, Layout layout,
               bool broadcast_batch)
    : dtype_(dtype), batch_(batch), rows_(rows), heads_(heads), dim_(dim) {
    int64_t trailing_gap = 0;
    switch (layout) {
        case Layout::bshd:
            head_stride_ = dim;
            row_stride_ = heads * dim;
            batch_stride_ = rows * heads * dim;
            break;
        case Layout::bhsd:
            row_stride_ = dim;
            head_stride_ = rows * dim;
            batch_stride_ = heads * rows * dim;
            break;
        case Layout::padded:
            head_stride_ = dim + 3;
            row_stride_ = heads * head_stride_ + 5;
            batch_stride_ = rows * row_stride_ + 7;
            trailing_gap = 5;
            break;
    }
    if (broadcast_batch) batch_stride_ = 0;
    int64_t elements = 1;
    if (batch > 0 && rows > 0 && heads > 0 && dim > 0)
        elements = offset(batch - 1, rows - 1, heads - 1, dim - 1) + 1 + trailing_gap;
    // Never a zero-size allocation: data() stays a valid pointer for empty views too.
    storage_.assign(size_t(std::max<int64_t>(elements, 16) * dtype_size(dtype)), 0);
    const int64_t total = int64_t(storage_.size()) / dtype_size(dtype);
    for (int64_t i = 0; i < total; ++i) put_bits(storage_.data(), dtype_, i, sentinel_bits(dtype_));
}

fa_tensor Tensor::view() const {
    return fa_tensor{const_cast<unsigned char*>(storage_.data()), batch_stride_, row_stride_, head_stride_};
}

fa_tensor Tensor::varlen_view() const {
    fa_tensor t = view();
    t.batch_stride = -977; // ignored by the varlen entry points; a negative value proves it
    return t;
}

float Tensor::get(int64_t b, int64_t s, int64_t h, int64_t c) const {
    return load_float(storage_.data(), dtype_, offset(b, s, h, c));
}

void Tensor::set(int64_t b, int64_t s, int64_t h, int64_t c, float value) {
    store_float(storage_.data(), dtype_, offset(b, s, h, c), value);
}

void Tensor::fill_normal(std::mt19937_64& rng, double stddev) {
    std::normal_distribution<double> normal(0.0, stddev);
    for (int64_t b = 0; b < batch_; ++b)
        for (int64_t s = 0; s < rows_; ++s)
            for (int64_t h = 0; h < heads_; ++h)
                for (int64_t c = 0; c < dim_; ++c) set(b, s, h, c, float(normal(rng)));
}

void Tensor::fill_coarse(std::mt19937_64& rng) {
    std::uniform_int_distribution<int> steps(-128, 128);
    for (int64_t b = 0; b < batch_; ++b)
        for (int64_t s = 0; s < rows_; ++s)
            for (int64_t h = 0; h < heads_; ++h)
                for (int64_t c = 0; c < dim_; ++c) set(b, s, h, c, float(steps(rng)) / 64.0f);
}

void Tensor::poison() {
    for (int64_t b = 0; b < batch_; ++b)
        for (int64_t s = 0; s < rows_; ++s)
            for (int64_t h = 0; h < heads_; ++h)
                for (int64_t c = 0; c < dim_; ++c) put_bits(storage_.data(), dtype_, offset(b, s, h, c), poison_bits(dtype_));
}

std::vector<int64_t> Tensor::gap_offsets() const {
    const int64_t total = int64_t(storage_.size()) / dtype_size(dtype_);
    std::vector<bool> in_view(size_t(total), false);
    for (int64_t b = 0; b < batch_; ++b)
        for (int64_t s = 0; s < rows_; ++s)
            for (int64_t h = 0; h < heads_; ++h)
                for (int64_t c = 0; c < dim_; ++c) in_view[size_t(offset(b, s, h, c))] = true;
    std::vector<int64_t> gaps;
    for (int64_t i = 0; i < total; ++i)
        if (!in_view[size_t(i)]) gaps.push_back(i);
    return gaps;
}

bool Tensor::gaps_intact() const {
    for (int64_t i : gap_offsets())
        if (get_bits(storage_.data(), dtype_, i) != sentinel_bits(dtype_)) return false;
    return true;
}

std::vector<double> Tensor::canonical() const {
    std::vector<double> values;
    values.reserve(size_t(batch_ * rows_ * heads_ * dim_));
    for (int64_t b = 0; b < batch_; ++b)
        for (int64_t s = 0; s < rows_; ++s)
            for (int64_t h = 0; h < heads_; ++h)
                for (int64_t c = 0; c < dim_; ++c) values.push_back(get(b, s, h, c));
    return values;
}

// ---------------------------------------------------------------------------------------------
// Case

std::string describe(const Case& c) {
    std::ostringstream s;
    s << dtype_short(c.dtype) << " b" << (c.varlen ? int(c.q_lens.size()) : c.batch) << " h" << c.heads << "/" << c.heads_k;
    if (c.varlen) {
        s << " varlen q[";
        for (size_t i = 0; i < c.q_lens.size(); ++i) s << (i ? "," : "") << c.q_lens[i];
        s << "] k[";
        for (size_t i = 0; i < c.k_lens.size(); ++i) s << (i ? "," : "") << c.k_lens[i];
        s << "]";
    } else {
        s << " sq" << c.seqlen_q << " sk" << c.seqlen_k;
    }
    s << " d" << c.head_dim;
    if (c.head_dim_v > 0) s << "/" << c.head_dim_v;
    if (c.learnable_sink) s << " sink" << (c.sink_mean != 0.0 ? std::to_string(c.sink_mean) : "");
    if (c.causal) s << " causal";
    if (c.window_left >= 0 || c.window_right >= 0) s << " window(" << c.window_left << "," << c.window_right << ")";
    if (c.softcap > 0) s << " softcap" << c.softcap;
    if (c.alibi == Alibi::per_head) s << " alibi";
    if (c.alibi == Alibi::per_batch_and_head) s << " alibi_per_batch";
    if (c.dropout_p > 0) s << " dropout" << c.dropout_p;
    if (c.softmax_scale != 0) s << " scale" << c.softmax_scale;
    if (c.input_stddev != 1.0) s << " std" << c.input_stddev;
    if (c.kv_batch_broadcast) s << " kv_batch_broadcast";
    if (!c.seqused_k.empty()) s << " seqused_k";
    s << " " << layout_name(c.layout) << " " << backend_name(c.backend);
    return s.str();
}

void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }
void PrintTo(Backend backend, std::ostream* os) { *os << backend_name(backend); }

std::string sanitize_name(const std::string& name) {
    std::string out;
    for (char ch : name) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
    return out;
}

uint64_t seed_from(const std::string& text) {
    uint64_t hash = 1469598103934665603ull; // FNV-1a
    for (unsigned char ch : text) hash = (hash ^ ch) * 1099511628211ull;
    return hash;
}

// ---------------------------------------------------------------------------------------------
// AttentionRun

AttentionRun::AttentionRun(const Case& c) : case_(c) {
    Case& cs = case_; // with the varlen maxima filled in
    if (cs.varlen) {
        cs.batch = int(cs.q_lens.size());
        cs.seqlen_q = cs.q_lens.empty() ? 0 : *std::max_element(cs.q_lens.begin(), cs.q_lens.end());
        cs.seqlen_k = cs.k_lens.empty() ? 0 : *std::max_element(cs.k_lens.begin(), cs.k_lens.end());
        cu_seqlens_q.assign(1, 0);
        cu_seqlens_k.assign(1, 0);
        for (int len : cs.q_lens) cu_seqlens_q.push_back(cu_seqlens_q.back() + len);
        for (int len : cs.k_lens) cu_seqlens_k.push_back(cu_seqlens_k.back() + len);
        total_q = cu_seqlens_q.back() + cs.spare_rows;
        total_k = cu_seqlens_k.back() + cs.spare_rows;
    } else {
        total_q = int64_t(cs.batch) * cs.seqlen_q;
        total_k = int64_t(cs.batch) * cs.seqlen_k;
    }
    const int64_t tensor_batch = cs.varlen ? 1 : cs.batch;
    const int64_t q_rows = cs.varlen ? total_q : cs.seqlen_q;
    const int64_t k_rows = cs.varlen ? total_k : cs.seqlen_k;
    const int dim_v = value_dim(cs);
    auto q_like = [&](int dim) { return Tensor(cs.dtype, tensor_batch, q_rows, cs.heads, dim, cs.layout); };
    auto k_like = [&](int dim, bool broadcast) {
        return Tensor(cs.dtype, tensor_batch, k_rows, cs.heads_k, dim, cs.layout, broadcast);
    };
    const bool broadcast = cs.kv_batch_broadcast && !cs.varlen;
    q = q_like(cs.head_dim), out = q_like(dim_v), dout = q_like(dim_v), dq = q_like(cs.head_dim);
    k = k_like(cs.head_dim, broadcast), v = k_like(dim_v, broadcast), dk = k_like(cs.head_dim, false);
    dv = k_like(dim_v, false);

    if (cs.rng_in_memory) rng_state = {cs.rng_seed, cs.rng_offset};

    std::mt19937_64 rng(cs.seed);
    q.fill_normal(rng, cs.input_stddev);
    k.fill_normal(rng, cs.input_stddev);
    v.fill_normal(rng, cs.input_stddev);
    dout.fill_normal(rng, cs.input_stddev);
    if (cs.learnable_sink) {
        std::normal_distribution<double> normal(cs.sink_mean, 1.0);
        for (int h = 0; h < cs.heads; ++h) sink.push_back(float(normal(rng)));
        dsink.assign(size_t(cs.heads), 0.0f);
    }

    lse.assign(size_t(cs.varlen ? int64_t(cs.heads) * total_q : total_q * cs.heads), 0.0f);
    if (cs.want_probs) probs.assign(size_t(int64_t(cs.batch) * cs.heads * cs.seqlen_q * cs.seqlen_k), 0.0f);
    seqused_k.assign(cs.seqused_k.begin(), cs.seqused_k.end());

    if (cs.alibi == Alibi::per_head) {
        for (int h = 0; h < cs.heads; ++h) alibi_slopes.push_back(std::exp2(-8.0f * float(h + 1) / float(cs.heads)));
    } else if (cs.alibi == Alibi::per_batch_and_head) {
        // Stride heads + 1 (> heads) so that a backend ignoring alibi_batch_stride reads wrong slopes.
        alibi_slopes.assign(size_t(cs.batch * (cs.heads + 1)), std::numeric_limits<float>::quiet_NaN());
        for (int b = 0; b < cs.batch; ++b)
            for (int h = 0; h < cs.heads; ++h)
                alibi_slopes[size_t(b * (cs.heads + 1) + h)] = std::exp2(-8.0f * float(h + 1) / float(cs.heads)) * (0.5f + b);
    }

    // Which canonical rows are inside a sequence, and which lse entries are.
    q_row_used.assign(size_t(tensor_batch * q_rows), !cs.varlen);
    k_row_used.assign(size_t(tensor_batch * k_rows), !cs.varlen);
    lse_used.assign(lse.size(), !cs.varlen);
    if (cs.varlen) {
        for (int b = 0; b < cs.batch; ++b) {
            for (int32_t r = cu_seqlens_q[b]; r < cu_seqlens_q[b + 1]; ++r) {
                q_row_used[size_t(r)] = true;
                for (int h = 0; h < cs.heads; ++h) lse_used[size_t(h * total_q + r)] = true;
            }
            for (int32_t r = cu_seqlens_k[b]; r < cu_seqlens_k[b + 1]; ++r) k_row_used[size_t(r)] = true;
        }
    }
}

fa_fwd_params AttentionRun::fwd_params() const {
    const Case& c = case_;
    fa_fwd_params p;
    fa_fwd_params_init(&p);
    p.dtype = c.dtype;
    p.batch = c.batch;
    p.seqlen_q = c.seqlen_q;
    p.seqlen_k = c.seqlen_k;
    p.num_heads = c.heads;
    p.num_heads_k = c.heads_k;
    p.head_dim = c.head_dim;
    p.head_dim_v = c.head_dim_v;
    p.learnable_sink = sink.empty() ? nullptr : sink.data();
    p.q = c.varlen ? q.varlen_view() : q.view();
    p.k = c.varlen ? k.varlen_view() : k.view();
    p.v = c.varlen ? v.varlen_view() : v.view();
    p.out = c.varlen ? out.varlen_view() : out.view();
    p.softmax_lse = c.with_lse ? const_cast<float*>(lse.data()) : nullptr;
    if (c.varlen) {
        p.cu_seqlens_q = cu_seqlens_q.data();
        p.cu_seqlens_k = cu_seqlens_k.data();
        p.total_q = total_q;
        p.total_k = total_k;
    }
    p.seqused_k = seqused_k.empty() ? nullptr : seqused_k.data();
    p.softmax_scale = c.softmax_scale;
    p.causal = c.causal ? 1 : 0;
    p.window_left = c.window_left;
    p.window_right = c.window_right;
    p.softcap = c.softcap;
    p.alibi_slopes = alibi_slopes.empty() ? nullptr : alibi_slopes.data();
    p.alibi_batch_stride = c.alibi == Alibi::per_batch_and_head ? c.heads + 1 : 0;
    p.dropout_p = c.dropout_p;
    p.rng_seed = c.rng_seed;
    p.rng_offset = c.rng_offset;
    if (c.rng_in_memory) {
        p.rng_state = rng_state.data();
        p.rng_seed = ~c.rng_seed; // must be ignored: rng_state takes their place
        p.rng_offset = ~c.rng_offset;
    }
    p.attn_probs = c.want_probs ? const_cast<float*>(probs.data()) : nullptr;
    p.num_splits = c.num_splits;
    p.backend = to_fa_backend(c.backend);
    return p;
}

fa_bwd_params AttentionRun::bwd_params() const {
    fa_bwd_params p;
    fa_bwd_params_init(&p);
    p.fwd = fwd_params();
    p.fwd.softmax_lse = const_cast<float*>(lse.data());
    p.fwd.attn_probs = nullptr;
    const bool varlen = case_.varlen;
    p.dout = varlen ? dout.varlen_view() : dout.view();
    p.dq = varlen ? dq.varlen_view() : dq.view();
    p.dk = varlen ? dk.varlen_view() : dk.view();
    p.dv = varlen ? dv.varlen_view() : dv.view();
    p.dsink = dsink.empty() ? nullptr : const_cast<float*>(dsink.data());
    p.deterministic = case_.deterministic ? 1 : 0;
    return p;
}

Problem AttentionRun::problem() const {
    const fa_fwd_params p = fwd_params();
    return make_problem(&p, case_.varlen);
}

BwdProblem AttentionRun::bwd_problem() const {
    const fa_bwd_params p = bwd_params();
    return make_bwd_problem(&p, case_.varlen);
}

fa_status AttentionRun::forward() {
    out.poison();
    std::fill(lse.begin(), lse.end(), std::numeric_limits<float>::quiet_NaN());
    std::fill(probs.begin(), probs.end(), std::numeric_limits<float>::quiet_NaN());
    return call_forward(fwd_params());
}

fa_status AttentionRun::backward() {
    dq.poison();
    dk.poison();
    dv.poison();
    std::fill(dsink.begin(), dsink.end(), std::numeric_limits<float>::quiet_NaN());
    return call_backward(bwd_params());
}

namespace {

template <typename T>
size_t vector_bytes(const std::vector<T>& v) {
    return v.size() * sizeof(T);
}

// Bytes of the buffers a call must only read, to prove afterwards that it did.
class InputSnapshot {
public:
    void add(const char* name, const void* data, size_t bytes) {
        const auto* p = static_cast<const unsigned char*>(data);
        entries_.push_back({name, data, std::vector<unsigned char>(p, p + (data ? bytes : 0))});
    }
    // Names of the inputs whose bytes changed ("" when none did).
    std::string damage() const {
        std::string changed;
        for (const Entry& e : entries_)
            if (!e.bytes.empty() && std::memcmp(e.data, e.bytes.data(), e.bytes.size()) != 0)
                changed += std::string(changed.empty() ? "" : ", ") + e.name;
        return changed.empty() ? changed : "the call wrote to its input(s): " + changed;
    }

private:
    struct Entry {
        const char* name;
        const void* data;
        std::vector<unsigned char> bytes;
    };
    std::vector<Entry> entries_;
};

} // namespace

fa_status AttentionRun::call_forward(const fa_fwd_params& host) {
    InputSnapshot inputs;
    inputs.add("q", q.data(), q.bytes());
    inputs.add("k", k.data(), k.bytes());
    inputs.add("v", v.data(), v.bytes());
    inputs.add("cu_seqlens_q", cu_seqlens_q.data(), vector_bytes(cu_seqlens_q));
    inputs.add("cu_seqlens_k", cu_seqlens_k.data(), vector_bytes(cu_seqlens_k));
    inputs.add("seqused_k", seqused_k.data(), vector_bytes(seqused_k));
    inputs.add("alibi_slopes", alibi_slopes.data(), vector_bytes(alibi_slopes));
    inputs.add("learnable_sink", sink.data(), vector_bytes(sink));
    fa_status status;
    if (case_.backend == Backend::cpu) {
        status = case_.varlen ? fa_varlen_forward(&host) : fa_forward(&host);
    } else {
        DeviceMirror mirror;
        fa_fwd_params p = host;
        p.q.data = mirror.mirror(q.data(), q.bytes(), false);
        p.k.data = mirror.mirror(k.data(), k.bytes(), false);
        p.v.data = mirror.mirror(v.data(), v.bytes(), false);
        p.out.data = mirror.mirror(out.data(), out.bytes(), true);
        p.softmax_lse = static_cast<float*>(mirror.mirror(host.softmax_lse, vector_bytes(lse), true));
        p.attn_probs = static_cast<float*>(mirror.mirror(host.attn_probs, vector_bytes(probs), true));
        p.cu_seqlens_q = static_cast<const int32_t*>(mirror.mirror(host.cu_seqlens_q, vector_bytes(cu_seqlens_q), false));
        p.cu_seqlens_k = static_cast<const int32_t*>(mirror.mirror(host.cu_seqlens_k, vector_bytes(cu_seqlens_k), false));
        p.seqused_k = static_cast<const int32_t*>(mirror.mirror(host.seqused_k, vector_bytes(seqused_k), false));
        p.alibi_slopes = static_cast<const float*>(mirror.mirror(host.alibi_slopes, vector_bytes(alibi_slopes), false));
        p.rng_state = static_cast<const uint64_t*>(mirror.mirror(host.rng_state, vector_bytes(rng_state), false));
        p.learnable_sink = static_cast<const float*>(mirror.mirror(host.learnable_sink, vector_bytes(sink), false));
        status = case_.varlen ? fa_varlen_forward(&p) : fa_forward(&p);
        if (status == FA_OK) mirror.copy_outputs_back();
    }
    last_error_ = fa_last_error();
    input_damage_ = inputs.damage();
    return status;
}

fa_status AttentionRun::call_backward(const fa_bwd_params& host) {
    InputSnapshot inputs;
    inputs.add("q", q.data(), q.bytes());
    inputs.add("k", k.data(), k.bytes());
    inputs.add("v", v.data(), v.bytes());
    inputs.add("out", out.data(), out.bytes());
    inputs.add("dout", dout.data(), dout.bytes());
    inputs.add("softmax_lse", lse.data(), vector_bytes(lse));
    inputs.add("cu_seqlens_q", cu_seqlens_q.data(), vector_bytes(cu_seqlens_q));
    inputs.add("cu_seqlens_k", cu_seqlens_k.data(), vector_bytes(cu_seqlens_k));
    inputs.add("seqused_k", seqused_k.data(), vector_bytes(seqused_k));
    inputs.add("alibi_slopes", alibi_slopes.data(), vector_bytes(alibi_slopes));
    inputs.add("learnable_sink", sink.data(), vector_bytes(sink));
    fa_status status;
    if (case_.backend == Backend::cpu) {
        status = case_.varlen ? fa_varlen_backward(&host) : fa_backward(&host);
    } else {
        DeviceMirror mirror;
        fa_bwd_params p = host;
        fa_fwd_params& f = p.fwd;
        f.q.data = mirror.mirror(q.data(), q.bytes(), false);
        f.k.data = mirror.mirror(k.data(), k.bytes(), false);
        f.v.data = mirror.mirror(v.data(), v.bytes(), false);
        f.out.data = mirror.mirror(out.data(), out.bytes(), false);
        f.softmax_lse = static_cast<float*>(mirror.mirror(host.fwd.softmax_lse, vector_bytes(lse), false));
        f.cu_seqlens_q = static_cast<const int32_t*>(mirror.mirror(host.fwd.cu_seqlens_q, vector_bytes(cu_seqlens_q), false));
        f.cu_seqlens_k = static_cast<const int32_t*>(mirror.mirror(host.fwd.cu_seqlens_k, vector_bytes(cu_seqlens_k), false));
        f.seqused_k = static_cast<const int32_t*>(mirror.mirror(host.fwd.seqused_k, vector_bytes(seqused_k), false));
        f.alibi_slopes = static_cast<const float*>(mirror.mirror(host.fwd.alibi_slopes, vector_bytes(alibi_slopes), false));
        f.rng_state = static_cast<const uint64_t*>(mirror.mirror(host.fwd.rng_state, vector_bytes(rng_state), false));
        f.learnable_sink = static_cast<const float*>(mirror.mirror(host.fwd.learnable_sink, vector_bytes(sink), false));
        p.dsink = static_cast<float*>(mirror.mirror(host.dsink, vector_bytes(dsink), true));
        p.dout.data = mirror.mirror(dout.data(), dout.bytes(), false);
        p.dq.data = mirror.mirror(dq.data(), dq.bytes(), true);
        p.dk.data = mirror.mirror(dk.data(), dk.bytes(), true);
        p.dv.data = mirror.mirror(dv.data(), dv.bytes(), true);
        status = case_.varlen ? fa_varlen_backward(&p) : fa_backward(&p);
        if (status == FA_OK) mirror.copy_outputs_back();
    }
    last_error_ = fa_last_error();
    input_damage_ = inputs.damage();
    return status;
}

// ---------------------------------------------------------------------------------------------
// Comparisons

Deviation max_deviation(const std::vector<double>& ours, const std::vector<double>& reference,
                        const std::vector<bool>* used) {
    Deviation worst;
    const size_t n = std::min(ours.size(), reference.size());
    for (size_t i = 0; i < n; ++i) {
        if (used && !(*used)[i]) continue;
        const double a = ours[i], r = reference[i];
        double diff;
        if (std::isnan(a) || std::isnan(r)) diff = std::numeric_limits<double>::infinity();
        else if (a == r) diff = 0.0; // also equal infinities (lse of rows without keys)
        else diff = std::fabs(a - r);
        if (worst.index < 0 || diff > worst.max_abs) worst = Deviation{diff, int64_t(i), a, r};
    }
    if (ours.size() != reference.size()) worst.max_abs = std::numeric_limits<double>::infinity();
    return worst;
}

double max_abs(const std::vector<double>& values) {
    double m = 0.0;
    for (double x : values)
        if (std::isfinite(x)) m = std::max(m, std::fabs(x));
    return m;
}

double tolerance_floor(fa_dtype dtype, double magnitude) {
    const double base = dtype == FA_FLOAT32 ? 2e-6 : dtype == FA_FLOAT16 ? 1e-5 : 5e-5;
    return base * std::max(1.0, magnitude);
}

namespace {

std::string index_text(int64_t index, const std::vector<int64_t>& shape) {
    if (index < 0) return "(none)";
    std::vector<int64_t> coords(shape.size());
    int64_t rest = index;
    for (size_t d = shape.size(); d-- > 0;) {
        coords[d] = shape[d] > 0 ? rest % shape[d] : 0;
        rest = shape[d] > 0 ? rest / shape[d] : 0;
    }
    std::ostringstream s;
    s << "[";
    for (size_t d = 0; d < coords.size(); ++d) s << (d ? ", " : "") << coords[d];
    s << "]";
    return s.str();
}

} // namespace

::testing::AssertionResult within_tolerance(const char* what, const std::vector<double>& ours,
                                            const std::vector<double>& fp64, const std::vector<double>& naive,
                                            double factor, fa_dtype dtype, const std::vector<bool>* used,
                                            const std::vector<int64_t>& shape) {
    if (ours.size() != fp64.size())
        return ::testing::AssertionFailure() << what << ": " << ours.size() << " values, reference has " << fp64.size();
    const Deviation mine = max_deviation(ours, fp64, used);
    const Deviation theirs = max_deviation(naive, fp64, used);
    const double floor = tolerance_floor(dtype, max_abs(fp64));
    const double allowed = factor * theirs.max_abs + floor;
    std::ostringstream s;
    s << std::setprecision(6) << what << ": max|ours - fp64| = " << mine.max_abs << " at " << index_text(mine.index, shape)
      << " (ours " << mine.ours << ", fp64 " << mine.reference << "); allowed " << factor << " x naive error "
      << theirs.max_abs << " + floor " << floor << " = " << allowed;
    // FLASHATTN_TEST_VERBOSE=1 prints every comparison, to see the margins of passing tests too.
    static const bool verbose = std::getenv("FLASHATTN_TEST_VERBOSE") != nullptr;
    if (verbose) std::printf("  [tolerance] %s\n", s.str().c_str());
    if (mine.max_abs <= allowed) return ::testing::AssertionSuccess() << s.str();
    return ::testing::AssertionFailure() << s.str();
}

std::vector<bool> expand_rows(const std::vector<bool>& rows, int64_t per_row) {
    std::vector<bool> out;
    out.reserve(rows.size() * size_t(per_row));
    for (bool r : rows) out.insert(out.end(), size_t(per_row), r);
    return out;
}

std::vector<double> to_double(const std::vector<float>& values) { return {values.begin(), values.end()}; }

::testing::AssertionResult all_written(const char* what, const Tensor& t, const std::vector<bool>* rows_used) {
    for (int64_t b = 0; b < t.batch(); ++b)
        for (int64_t s = 0; s < t.rows(); ++s) {
            if (rows_used && !(*rows_used)[size_t(b * t.rows() + s)]) continue;
            for (int64_t h = 0; h < t.heads(); ++h)
                for (int64_t c = 0; c < t.dim(); ++c)
                    if (std::isnan(t.get(b, s, h, c)))
                        return ::testing::AssertionFailure()
                               << what << "[" << b << ", " << s << ", " << h << ", " << c
                               << "] is NaN: the element was never written (outputs are NaN-poisoned before the call)";
        }
    if (!t.gaps_intact())
        return ::testing::AssertionFailure() << what << ": memory between the view's elements (padding) was written";
    return ::testing::AssertionSuccess();
}

void expect_forward_matches_reference(AttentionRun& run) {
    const Case& c = run.c();
    const Problem problem = run.problem();
    const auto fp64 = reference::forward(problem, reference::Precision::fp64, c.want_probs);
    const auto naive = reference::naive_yardstick(problem, c.want_probs, fp64);

    const int64_t rows = int64_t(run.q_row_used.size());
    const std::vector<bool> used = expand_rows(run.q_row_used, int64_t(c.heads) * value_dim(c));
    EXPECT_EQ(run.input_damage(), "");
    EXPECT_TRUE(all_written("out", run.out, &run.q_row_used));
    EXPECT_TRUE(within_tolerance("out", run.out.canonical(), fp64.out, naive.out, 2.0, c.dtype, &used,
                                 {rows, c.heads, value_dim(c)}));
    if (c.with_lse) {
        const std::vector<double> lse = to_double(run.lse);
        for (size_t i = 0; i < lse.size(); ++i)
            if (run.lse_used[i] && std::isnan(lse[i])) {
                ADD_FAILURE() << "softmax_lse[" << i << "] is NaN: never written, or NaN computed";
                break;
            }
        // lse is fp32 in every dtype; a fully masked row must be exactly -inf (equal infinities
        // compare as no difference, anything else as an infinite one).
        const std::vector<int64_t> shape =
            c.varlen ? std::vector<int64_t>{c.heads, run.total_q} : std::vector<int64_t>{c.batch, c.heads, c.seqlen_q};
        EXPECT_TRUE(within_tolerance("softmax_lse", lse, fp64.lse, naive.lse, 2.0, FA_FLOAT32, &run.lse_used, shape));
    }
    if (c.want_probs) {
        const std::vector<double> probs = to_double(run.probs);
        EXPECT_TRUE(within_tolerance("attn_probs", probs, fp64.probs, naive.probs, 2.0, c.dtype, nullptr,
                                     {c.batch, c.heads, c.seqlen_q, c.seqlen_k}));
    }
}

void expect_backward_matches_reference(AttentionRun& run) {
    const Case& c = run.c();
    const BwdProblem problem = run.bwd_problem();
    const auto fp64 = reference::backward(problem, reference::Precision::fp64);
    // (Where a row's dS cancels exactly in a framework's naive form, one key in view, the yardstick
    // is FlashAttention's formula's: reference::Formula.)
    const auto naive = reference::naive_yardstick(problem, fp64);

    const int64_t q_rows = int64_t(run.q_row_used.size()), k_rows = int64_t(run.k_row_used.size());
    const std::vector<bool> q_used = expand_rows(run.q_row_used, int64_t(c.heads) * c.head_dim);
    const std::vector<bool> k_used = expand_rows(run.k_row_used, int64_t(c.heads_k) * c.head_dim);
    const std::vector<bool> v_used = expand_rows(run.k_row_used, int64_t(c.heads_k) * value_dim(c));
    EXPECT_EQ(run.input_damage(), "");
    EXPECT_TRUE(all_written("dq", run.dq, &run.q_row_used));
    EXPECT_TRUE(all_written("dk", run.dk, &run.k_row_used));
    EXPECT_TRUE(all_written("dv", run.dv, &run.k_row_used));
    EXPECT_TRUE(within_tolerance("dq", run.dq.canonical(), fp64.dq, naive.dq, 3.0, c.dtype, &q_used,
                                 {q_rows, c.heads, c.head_dim}));
    EXPECT_TRUE(within_tolerance("dk", run.dk.canonical(), fp64.dk, naive.dk, 3.0, c.dtype, &k_used,
                                 {k_rows, c.heads_k, c.head_dim}));
    EXPECT_TRUE(within_tolerance("dv", run.dv.canonical(), fp64.dv, naive.dv, 3.0, c.dtype, &v_used,
                                 {k_rows, c.heads_k, value_dim(c)}));
    if (c.learnable_sink && !run.dsink.empty()) {
        // dsink sums one term per row of the head, p_sink(i) * rowsum(dO_i * O_i), where O_i is the
        // forward's output rounded to the dtype: each term carries that rounding, and terms of both
        // signs cancel. The floor is therefore the dtype's on the sum of the terms' magnitudes, plus
        // twice the dtype's unit roundoff at the root-sum-square scale of O's rounding in the terms
        // (Gradients::dsink_rounding): a sum of many rows' roundings, whose size varies from one set
        // of inputs to the next as much as the naive error it is compared with does.
        const double magnitude = *std::max_element(fp64.dsink_magnitude.begin(), fp64.dsink_magnitude.end());
        const double rounding = *std::max_element(fp64.dsink_rounding.begin(), fp64.dsink_rounding.end());
        const std::vector<double> ours = to_double(run.dsink);
        const Deviation d = max_deviation(ours, fp64.dsink);
        const double bound = 3.0 * max_deviation(naive.dsink, fp64.dsink).max_abs + tolerance_floor(c.dtype, magnitude) +
                             2.0 * reference::unit_roundoff(c.dtype) * rounding;
        EXPECT_LE(d.max_abs, bound) << "dsink: max|ours - fp64| = " << d.max_abs << " at [" << d.index << "] (ours "
                                    << d.ours << ", fp64 " << d.reference << "); allowed " << bound
                                    << " (3 x naive error + floor for a sum of magnitude " << magnitude
                                    << " + 2 u x rounding scale " << rounding << ")";
    }
}

} // namespace flashattn::testing
