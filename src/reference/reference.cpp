// The reference: naive attention over one (sequence, head) at a time, with S materialised.
//
// One code path serves both precisions. An `Arithmetic` policy says how a dot product accumulates
// and how an intermediate tensor is stored: in fp64 nothing is ever rounded; in same_as_inputs every
// product accumulates in fp32 and every intermediate tensor (scaled q, S, P, O, dP, dS, gradients)
// is rounded to the inputs' dtype, which is what unfused framework ops (q * scale, einsum, softmax,
// dropout, einsum) produce. FlashAttention's accuracy claim is measured against that naive error.
//
// Semantics (scale, mask, softcap, ALiBi, spans, offsets) all come from core/problem.h.
#include "reference.h"

#include "core/dtype.h"
#include "core/error.h"

#include <flashattn/philox.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace flashattn::reference {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

struct Arithmetic {
    Precision precision;
    fa_dtype dtype;

    bool exact() const { return precision == Precision::fp64; }

    // An intermediate tensor element as the naive computation would hold it in memory.
    double store(double x) const { return exact() ? x : double(round_to(dtype, float(x))); }

    // Dot product of two rows: double, or fp32 accumulation as a GEMM on half/bf16/fp32 inputs does.
    double dot(const double* a, const double* b, int64_t n) const {
        if (exact()) {
            double acc = 0.0;
            for (int64_t t = 0; t < n; ++t) acc += a[t] * b[t];
            return acc;
        }
        float acc = 0.0f;
        for (int64_t t = 0; t < n; ++t) acc = std::fma(float(a[t]), float(b[t]), acc);
        return acc;
    }

    // acc += weight * row, in the accumulation precision (the caller stores the result).
    void axpy(double weight, const double* row, double* acc, int64_t n) const {
        if (exact()) {
            for (int64_t t = 0; t < n; ++t) acc[t] += weight * row[t];
        } else {
            for (int64_t t = 0; t < n; ++t) acc[t] = std::fma(float(weight), float(row[t]), float(acc[t]));
        }
    }

    double exp(double x) const { return exact() ? std::exp(x) : double(std::exp(float(x))); }
    double log(double x) const { return exact() ? std::log(x) : double(std::log(float(x))); }
    double add(double a, double b) const { return exact() ? a + b : double(float(a) + float(b)); }
};

// A (len x head_dim) block of a q-shaped or k-shaped tensor, as doubles, row-major.
using Rows = std::vector<double>;

Rows load_q_rows(const Problem& pr, const fa_tensor& t, const Span& s, int64_t h) {
    const int64_t d = pr.head_dim();
    Rows rows(size_t(s.q_len * d));
    for (int64_t i = 0; i < s.q_len; ++i) {
        const int64_t base = pr.q_offset(t, s, i, h);
        for (int64_t c = 0; c < d; ++c) rows[size_t(i * d + c)] = load_float(t.data, pr.p.dtype, base + c);
    }
    return rows;
}

Rows load_k_rows(const Problem& pr, const fa_tensor& t, const Span& s, int64_t h_k) {
    const int64_t d = pr.head_dim();
    Rows rows(size_t(s.k_len * d));
    for (int64_t j = 0; j < s.k_len; ++j) {
        const int64_t base = pr.k_offset(t, s, j, h_k);
        for (int64_t c = 0; c < d; ++c) rows[size_t(j * d + c)] = load_float(t.data, pr.p.dtype, base + c);
    }
    return rows;
}

// Everything the forward of one (sequence, query head) produces, kept for the backward.
struct HeadForward {
    int64_t q_len = 0, k_len = 0, d = 0;
    Rows q_scaled;                 // q * scale as stored (the backward's dK uses it)
    Rows k, v;
    std::vector<double> capped;    // softcapped score before ALiBi (q_len x k_len), for its derivative
    std::vector<double> prob;      // normalised softmax P, 0 where masked
    std::vector<double> keep;      // dropout factor: 1/(1-p) kept, 0 dropped (1 without dropout)
    std::vector<double> dropped;   // P * keep: what multiplies V
    std::vector<double> lse;       // per row; -inf when the row sees no key
    Rows out;                      // q_len x d

    double& at(std::vector<double>& m, int64_t i, int64_t j) { return m[size_t(i * k_len + j)]; }
};

// Scale applied to kept probabilities, and whether element (i, j) of this head is kept.
struct DropoutPolicy {
    bool active;
    double keep_scale;
    uint32_t threshold;

    static DropoutPolicy of(const Problem& pr) {
        const bool on = pr.has_dropout();
        return {on, on ? 1.0 / (1.0 - double(pr.p.dropout_p)) : 1.0, dropout_keep_threshold(pr.p.dropout_p)};
    }
};

HeadForward forward_head(const Problem& pr, const Span& s, int64_t h, const Arithmetic& math) {
    HeadForward f;
    f.q_len = s.q_len;
    f.k_len = s.k_len;
    f.d = pr.head_dim();
    const int64_t d = f.d;
    const fa_fwd_params& p = pr.p;

    f.q_scaled = load_q_rows(pr, p.q, s, h);
    for (double& x : f.q_scaled) x = math.store(x * double(pr.scale));
    f.k = load_k_rows(pr, p.k, s, pr.kv_head(h));
    f.v = load_k_rows(pr, p.v, s, pr.kv_head(h));

    const size_t cells = size_t(f.q_len * f.k_len);
    f.capped.assign(cells, 0.0);
    f.prob.assign(cells, 0.0);
    f.keep.assign(cells, 0.0);
    f.dropped.assign(cells, 0.0);
    f.lse.assign(size_t(f.q_len), kMinusInf);
    f.out.assign(size_t(f.q_len * d), 0.0);

    const double softcap = p.softcap;
    const double slope = pr.alibi_slope(s.batch, h);
    const DropoutPolicy dropout = DropoutPolicy::of(pr);
    std::vector<double> score(size_t(f.k_len));

    for (int64_t i = 0; i < f.q_len; ++i) {
        const KeyRange keys = pr.mask.keys_for_row(i, f.q_len, f.k_len);
        if (keys.empty()) continue; // out 0, lse -inf, P 0: a row that may attend to nothing
        double row_max = kMinusInf;
        for (int64_t j = keys.begin; j < keys.end; ++j) {
            const double qk = math.store(math.dot(&f.q_scaled[size_t(i * d)], &f.k[size_t(j * d)], d));
            f.at(f.capped, i, j) = math.store(transform_score(qk, softcap, 0.0, i, j, f.q_len, f.k_len));
            score[size_t(j)] = math.store(transform_score(qk, softcap, slope, i, j, f.q_len, f.k_len));
            row_max = std::max(row_max, score[size_t(j)]);
        }
        double denominator = 0.0;
        for (int64_t j = keys.begin; j < keys.end; ++j)
            denominator = math.add(denominator, math.exp(score[size_t(j)] - row_max));
        f.lse[size_t(i)] = math.add(row_max, math.log(denominator));

        const DropoutRow rng(pr.dropout_seed(), pr.dropout_offset(), s.batch, p.num_heads, h, i);
        std::vector<double> acc(size_t(d), 0.0);
        for (int64_t j = keys.begin; j < keys.end; ++j) {
            const double prob = math.store(math.exp(score[size_t(j)] - row_max) / denominator);
            const bool kept = !dropout.active || rng.bits_for_column(j) < dropout.threshold;
            const double keep = kept ? dropout.keep_scale : 0.0;
            const double dropped = math.store(prob * keep);
            f.at(f.prob, i, j) = prob;
            f.at(f.keep, i, j) = keep;
            f.at(f.dropped, i, j) = dropped;
            if (dropped != 0.0) math.axpy(dropped, &f.v[size_t(j * d)], acc.data(), d);
        }
        for (int64_t c = 0; c < d; ++c) f.out[size_t(i * d + c)] = math.store(acc[size_t(c)]);
    }
    return f;
}

// Row of (sequence, row) in the canonical (rows, heads, head_dim) results.
int64_t canonical_q_row(const Problem& pr, const Span& s, int64_t i) {
    return pr.varlen ? s.q_row0 + i : s.batch * pr.p.seqlen_q + i;
}
int64_t canonical_k_row(const Problem& pr, const Span& s, int64_t j) {
    return pr.varlen ? s.k_row0 + j : s.batch * pr.p.seqlen_k + j;
}
int64_t q_rows(const Problem& pr) { return pr.varlen ? pr.total_q : int64_t(pr.p.batch) * pr.p.seqlen_q; }
int64_t k_rows(const Problem& pr) { return pr.varlen ? pr.p.total_k : int64_t(pr.p.batch) * pr.p.seqlen_k; }

void check_readable(const Problem& pr) {
    // The reference reads cu_seqlens / seqused_k / alibi_slopes on the host; make sure they are sane
    // so that a malformed test never turns into an out-of-bounds read here.
    check_sequence_arrays(pr);
}

} // namespace

ForwardResult forward(const Problem& pr, Precision precision, bool want_probs) {
    check_readable(pr);
    const Arithmetic math{precision, pr.p.dtype};
    const int64_t H = pr.heads(), d = pr.head_dim(), Sq = pr.p.seqlen_q, Sk = pr.p.seqlen_k;

    ForwardResult r;
    r.out.assign(size_t(q_rows(pr) * H * d), 0.0);
    r.lse.assign(size_t(pr.varlen ? H * pr.total_q : pr.batch() * H * Sq), kMinusInf);
    if (want_probs) r.probs.assign(size_t(pr.batch() * H * Sq * Sk), 0.0);

    for (int64_t b = 0; b < pr.batch(); ++b) {
        const Span s = pr.span(b);
        for (int64_t h = 0; h < H; ++h) {
            HeadForward f = forward_head(pr, s, h, math);
            for (int64_t i = 0; i < s.q_len; ++i) {
                r.lse[size_t(pr.lse_index(s, i, h))] = f.lse[size_t(i)];
                double* out = &r.out[size_t((canonical_q_row(pr, s, i) * H + h) * d)];
                std::copy_n(&f.out[size_t(i * d)], d, out);
                if (!want_probs || s.k_len == 0) continue;
                double* probs = &r.probs[size_t(((b * H + h) * Sq + i) * Sk)];
                for (int64_t j = 0; j < s.k_len; ++j) {
                    const double prob = f.at(f.prob, i, j);
                    probs[j] = pr.mask.allowed(i, j, s.q_len, s.k_len) && f.at(f.keep, i, j) == 0.0 ? -prob : prob;
                }
            }
        }
    }
    return r;
}

Gradients backward(const BwdProblem& bp, Precision precision) {
    const Problem& pr = bp.fwd;
    check_readable(pr);
    const Arithmetic math{precision, pr.p.dtype};
    const int64_t H = pr.heads(), Hk = pr.p.num_heads_k, d = pr.head_dim();
    const double scale = pr.scale, softcap = pr.p.softcap;

    Gradients g;
    g.dq.assign(size_t(q_rows(pr) * H * d), 0.0);
    g.dk.assign(size_t(k_rows(pr) * Hk * d), 0.0);
    g.dv.assign(size_t(k_rows(pr) * Hk * d), 0.0);

    for (int64_t b = 0; b < pr.batch(); ++b) {
        const Span s = pr.span(b);
        // dK/dV of each KV head: per query head in the working precision, then summed over the
        // group (a framework's repeat_interleave backward), then stored.
        std::vector<double> dk_group(size_t(Hk * s.k_len * d), 0.0), dv_group(dk_group.size(), 0.0);
        for (int64_t h = 0; h < H; ++h) {
            HeadForward f = forward_head(pr, s, h, math);
            const Rows dout = load_q_rows(pr, bp.p.dout, s, h);
            std::vector<double> ds(f.prob.size(), 0.0);

            for (int64_t i = 0; i < s.q_len; ++i) {
                // dP = dO V^T (times the dropout mask and 1/(1-p)); dS = P (dP - rowsum(P dP)).
                std::vector<double> dp(size_t(s.k_len), 0.0);
                double dsum = 0.0;
                for (int64_t j = 0; j < s.k_len; ++j) {
                    if (f.at(f.prob, i, j) == 0.0) continue; // masked (or underflowed): no gradient
                    const double dp_raw = math.store(math.dot(&dout[size_t(i * d)], &f.v[size_t(j * d)], d));
                    dp[size_t(j)] = math.store(dp_raw * f.at(f.keep, i, j));
                    dsum = math.add(dsum, f.at(f.prob, i, j) * dp[size_t(j)]);
                }
                for (int64_t j = 0; j < s.k_len; ++j) {
                    const double prob = f.at(f.prob, i, j);
                    if (prob == 0.0) continue;
                    double grad = math.store(prob * (dp[size_t(j)] - dsum));
                    if (softcap > 0.0) {
                        const double t = f.at(f.capped, i, j) / softcap; // tanh of the uncapped score
                        grad = math.store(grad * math.store(1.0 - t * t));
                    }
                    f.at(ds, i, j) = grad;
                }
            }

            // dQ = scale * dS K (the framework's scale sits on q, so its chain rule scales dQ last).
            for (int64_t i = 0; i < s.q_len; ++i) {
                std::vector<double> acc(size_t(d), 0.0);
                for (int64_t j = 0; j < s.k_len; ++j)
                    if (f.at(ds, i, j) != 0.0) math.axpy(f.at(ds, i, j), &f.k[size_t(j * d)], acc.data(), d);
                double* dq = &g.dq[size_t((canonical_q_row(pr, s, i) * H + h) * d)];
                for (int64_t c = 0; c < d; ++c) dq[c] = math.store(math.store(acc[size_t(c)]) * scale);
            }
            // dK = dS^T (q * scale), dV = (P * mask / (1-p))^T dO, per query head.
            const int64_t hk = pr.kv_head(h);
            for (int64_t j = 0; j < s.k_len; ++j) {
                std::vector<double> acc_k(size_t(d), 0.0), acc_v(size_t(d), 0.0);
                for (int64_t i = 0; i < s.q_len; ++i) {
                    const double dsij = f.at(ds, i, j), pij = f.at(f.dropped, i, j);
                    if (dsij != 0.0) math.axpy(dsij, &f.q_scaled[size_t(i * d)], acc_k.data(), d);
                    if (pij != 0.0) math.axpy(pij, &dout[size_t(i * d)], acc_v.data(), d);
                }
                double* dk = &dk_group[size_t((hk * s.k_len + j) * d)];
                double* dv = &dv_group[size_t((hk * s.k_len + j) * d)];
                for (int64_t c = 0; c < d; ++c) {
                    dk[c] = math.add(dk[c], math.store(acc_k[size_t(c)]));
                    dv[c] = math.add(dv[c], math.store(acc_v[size_t(c)]));
                }
            }
        }
        for (int64_t hk = 0; hk < Hk; ++hk)
            for (int64_t j = 0; j < s.k_len; ++j)
                for (int64_t c = 0; c < d; ++c) {
                    const size_t from = size_t((hk * s.k_len + j) * d + c);
                    const size_t to = size_t((canonical_k_row(pr, s, j) * Hk + hk) * d + c);
                    g.dk[to] = math.store(dk_group[from]);
                    g.dv[to] = math.store(dv_group[from]);
                }
    }
    return g;
}

namespace {

// Row `row` of head_dim elements at `offset`, rotated to `position` (rotary on) and rounded to the dtype.
void rotated_row_into(const fa_kvcache_params& p, const void* src, int64_t src_offset, void* dst, int64_t dst_offset,
                      bool rotate, int64_t position) {
    const fa_dtype dtype = p.fwd.dtype;
    const int64_t d = p.fwd.head_dim;
    std::vector<float> x(static_cast<size_t>(d));
    for (int64_t c = 0; c < d; ++c) x[size_t(c)] = load_float(src, dtype, src_offset + c);
    if (rotate) {
        const int64_t half = p.rotary_dim / 2;
        std::vector<float> cos(static_cast<size_t>(half)), sin(static_cast<size_t>(half));
        for (int64_t t = 0; t < half; ++t) {
            cos[size_t(t)] = load_float(p.rotary_cos, dtype, position * half + t);
            sin[size_t(t)] = load_float(p.rotary_sin, dtype, position * half + t);
        }
        rotate_features(x.data(), cos.data(), sin.data(), p.rotary_dim, p.rotary_interleaved != 0);
    }
    for (int64_t c = 0; c < d; ++c) store_float(dst, dtype, dst_offset + c, x[size_t(c)]);
}

} // namespace

ForwardResult kvcache_forward(const KvCacheProblem& kp, Precision precision) {
    check_kvcache_arrays(kp);
    const fa_kvcache_params& p = kp.p;
    const fa_fwd_params& f = p.fwd;
    if (kp.appends())
        for (int64_t b = 0; b < f.batch; ++b)
            for (int64_t h_k = 0; h_k < f.num_heads_k; ++h_k)
                for (int64_t i = 0; i < p.seqlen_new; ++i) {
                    rotated_row_into(p, p.k_new.data,
                                     b * p.k_new.batch_stride + i * p.k_new.row_stride + h_k * p.k_new.head_stride,
                                     f.k.data, kp.cache_offset(f.k, b, i, h_k), kp.rotary(), kp.new_row(b, i));
                    rotated_row_into(p, p.v_new.data,
                                     b * p.v_new.batch_stride + i * p.v_new.row_stride + h_k * p.v_new.head_stride,
                                     f.v.data, kp.cache_offset(f.v, b, i, h_k), false, 0);
                }
    Problem attention = kp.attention;
    std::vector<unsigned char> rotated_q;
    if (kp.rotary()) {
        const int64_t d = f.head_dim, heads = f.num_heads;
        rotated_q.assign(size_t(std::max<int64_t>(1, int64_t(f.batch) * f.seqlen_q * heads * d) * dtype_size(f.dtype)), 0);
        const fa_tensor q_rot{rotated_q.data(), f.seqlen_q * heads * d, heads * d, d};
        for (int64_t b = 0; b < f.batch; ++b)
            for (int64_t i = 0; i < f.seqlen_q; ++i)
                for (int64_t h = 0; h < heads; ++h)
                    rotated_row_into(p, f.q.data, b * f.q.batch_stride + i * f.q.row_stride + h * f.q.head_stride,
                                     rotated_q.data(), b * q_rot.batch_stride + i * q_rot.row_stride + h * q_rot.head_stride,
                                     true, kp.query_position(b, i));
        attention.p.q = q_rot;
    }
    return forward(attention, precision);
}

ForwardResult combine(const CombineProblem& cp) {
    const fa_combine_params& p = cp.p;
    const int64_t H = p.num_heads, d = p.head_dim, Sq = p.seqlen_q;
    const float* partial = static_cast<const float*>(p.out_partial.data);
    ForwardResult r;
    r.out.assign(size_t(p.batch * Sq * H * d), 0.0);
    r.lse.assign(size_t(p.batch * H * Sq), kMinusInf);
    for (int64_t b = 0; b < p.batch; ++b)
        for (int64_t i = 0; i < Sq; ++i)
            for (int64_t h = 0; h < H; ++h) {
                double row_max = kMinusInf;
                for (int64_t s = 0; s < p.num_splits; ++s)
                    row_max = std::max(row_max, double(p.lse_partial.data[cp.partial_lse_offset(s, b, i, h)]));
                if (row_max == kMinusInf) continue; // every split empty: out 0, lse -inf
                double sum = 0.0;
                for (int64_t s = 0; s < p.num_splits; ++s)
                    sum += std::exp(double(p.lse_partial.data[cp.partial_lse_offset(s, b, i, h)]) - row_max);
                const double lse = row_max + std::log(sum);
                r.lse[size_t((b * H + h) * Sq + i)] = lse;
                double* out = &r.out[size_t(((b * Sq + i) * H + h) * d)];
                for (int64_t s = 0; s < p.num_splits; ++s) {
                    const double l = p.lse_partial.data[cp.partial_lse_offset(s, b, i, h)];
                    if (l == kMinusInf) continue; // never read
                    const double weight = std::exp(l - lse);
                    const float* o = partial + cp.partial_offset(s, b, i, h);
                    for (int64_t c = 0; c < d; ++c) out[c] += weight * double(o[c]);
                }
            }
    return r;
}

} // namespace flashattn::reference
