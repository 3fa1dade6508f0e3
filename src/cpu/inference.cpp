// The inference path's data movement on the CPU: appending new keys/values to a KV cache (with
// rotary embedding), rotating the queries, and merging partial results by their logsumexp. None of
// it is arithmetic-heavy (a few operations per element, once per call), so it is plain baseline C++
// over the Executor's threads; the attention itself is the ordinary forward kernel, which reads the
// cache through Problem::k_offset (pages, cache entries, left padding) like any other K/V.
#include "inference.h"

#include "core/dtype.h"
#include "core/lse_merge.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace flashattn::cpu {
namespace {

template <class Body>
void parallel_for(Executor& ex, int64_t count, Body& body) {
    ex.parallel_for(count, [](void* context, int64_t task, int worker) { (*static_cast<Body*>(context))(task, worker); },
                    &body);
}

// The rotary table's row at `position`, as floats.
struct RotaryRow {
    std::vector<float> cos, sin;

    RotaryRow(const fa_kvcache_params& p, int64_t position) : cos(size_t(p.rotary_dim / 2)), sin(cos.size()) {
        const int64_t half = p.rotary_dim / 2;
        for (int64_t t = 0; t < half; ++t) {
            cos[size_t(t)] = load_float(p.rotary_cos, p.fwd.dtype, position * half + t);
            sin[size_t(t)] = load_float(p.rotary_sin, p.fwd.dtype, position * half + t);
        }
    }
};

// dst row = src row (d elements of the dtype: head_dim, or head_dim_v for values), its first
// rotary_dim features rotated to `position` when rotary is on. Features that do not rotate are
// copied bit for bit.
void copy_row(const KvCacheProblem& kp, const void* src, int64_t src_offset, void* dst, int64_t dst_offset, int64_t d,
              bool rotate, int64_t position, std::vector<float>& scratch) {
    const fa_kvcache_params& p = kp.p;
    const fa_dtype dtype = p.fwd.dtype;
    const int64_t bytes = dtype_size(dtype);
    std::memmove(static_cast<char*>(dst) + dst_offset * bytes, static_cast<const char*>(src) + src_offset * bytes,
                 size_t(d * bytes));
    if (!rotate) return;
    const RotaryRow angle(p, position);
    scratch.resize(size_t(p.rotary_dim));
    for (int64_t c = 0; c < p.rotary_dim; ++c) scratch[size_t(c)] = load_float(src, dtype, src_offset + c);
    rotate_features(scratch.data(), angle.cos.data(), angle.sin.data(), p.rotary_dim, p.rotary_interleaved != 0);
    for (int64_t c = 0; c < p.rotary_dim; ++c) store_float(dst, dtype, dst_offset + c, scratch[size_t(c)]);
}

} // namespace

void append_to_cache(const KvCacheProblem& kp, Executor& ex) {
    if (!kp.appends() || kp.p.seqlen_new == 0) return;
    const fa_kvcache_params& p = kp.p;
    const int64_t heads_k = p.fwd.num_heads_k;
    // One task per (sequence, KV head): sequences write disjoint cache rows (validated).
    auto task = [&](int64_t index, int) {
        const int64_t b = index / heads_k, h_k = index % heads_k;
        std::vector<float> scratch;
        for (int64_t i = 0; i < p.seqlen_new; ++i) {
            const int64_t from_k = b * p.k_new.batch_stride + i * p.k_new.row_stride + h_k * p.k_new.head_stride;
            const int64_t from_v = b * p.v_new.batch_stride + i * p.v_new.row_stride + h_k * p.v_new.head_stride;
            copy_row(kp, p.k_new.data, from_k, p.fwd.k.data, kp.cache_offset(p.fwd.k, b, i, h_k), p.fwd.head_dim,
                     kp.rotary(), kp.new_row(b, i), scratch);
            copy_row(kp, p.v_new.data, from_v, p.fwd.v.data, kp.cache_offset(p.fwd.v, b, i, h_k), p.fwd.head_dim_v,
                     false, 0, scratch);
        }
    };
    parallel_for(ex, int64_t(p.fwd.batch) * heads_k, task);
}

Problem attention_with_rotated_queries(const KvCacheProblem& kp, Executor& ex) {
    Problem attention = kp.attention;
    if (!kp.rotary()) return attention;
    const fa_fwd_params& f = kp.p.fwd;
    const int64_t heads = f.num_heads, d = f.head_dim;
    const int64_t elements = int64_t(f.batch) * f.seqlen_q * heads * d;
    void* rotated = ex.allocate(size_t(std::max<int64_t>(elements, 1) * dtype_size(f.dtype)));
    const fa_tensor q_rot{rotated, f.seqlen_q * heads * d, heads * d, d};
    auto task = [&](int64_t index, int) {
        const int64_t b = index / f.seqlen_q, i = index % f.seqlen_q;
        std::vector<float> scratch;
        for (int64_t h = 0; h < heads; ++h)
            copy_row(kp, f.q.data, b * f.q.batch_stride + i * f.q.row_stride + h * f.q.head_stride, rotated,
                     b * q_rot.batch_stride + i * q_rot.row_stride + h * q_rot.head_stride, d, true,
                     kp.query_position(b, i), scratch);
    };
    parallel_for(ex, int64_t(f.batch) * f.seqlen_q, task);
    attention.p.q = q_rot;
    return attention;
}

void combine_partials(const CombineProblem& cp, Executor& ex) {
    const fa_combine_params& p = cp.p;
    const float* partial = static_cast<const float*>(p.out_partial.data);
    const int64_t d = p.head_dim, splits = p.num_splits;
    constexpr float kInf = std::numeric_limits<float>::infinity();
    // One task per (sequence, head); fp32 throughout, as a GPU would do it.
    auto task = [&](int64_t index, int) {
        const int64_t b = index / p.num_heads, h = index % p.num_heads;
        std::vector<float> acc(static_cast<size_t>(d), 0.0f);
        for (int64_t i = 0; i < p.seqlen_q; ++i) {
            // By logsumexp (core/lse_merge.h), in log2 units.
            LseSum total;
            for (int64_t s = 0; s < splits; ++s) total.add(p.lse_partial.data[cp.partial_lse_offset(s, b, i, h)] * kLog2e);
            const float lse2 = total.lse2();
            std::fill(acc.begin(), acc.end(), total.nan ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
            if (total.max > -kInf && !total.nan) {
                for (int64_t s = 0; s < splits; ++s) {
                    const float l = p.lse_partial.data[cp.partial_lse_offset(s, b, i, h)] * kLog2e;
                    if (!(l > -kInf)) continue; // an empty split: its output is never read
                    const float weight = LseSum::weight(l, lse2);
                    const float* o = partial + cp.partial_offset(s, b, i, h);
                    for (int64_t c = 0; c < d; ++c) acc[size_t(c)] += weight * o[c];
                }
            }
            const float lse = lse2 * kLn2;
            const int64_t out_at = b * p.out.batch_stride + i * p.out.row_stride + h * p.out.head_stride;
            for (int64_t c = 0; c < d; ++c) store_float(p.out.data, p.dtype, out_at + c, acc[size_t(c)]);
            if (p.lse.data) p.lse.data[b * p.lse.batch_stride + h * p.lse.head_stride + i * p.lse.row_stride] = lse;
        }
    };
    parallel_for(ex, int64_t(p.batch) * p.num_heads, task);
}

} // namespace flashattn::cpu
