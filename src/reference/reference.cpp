// The reference: naive attention, one block of query rows of one (sequence, head) at a time.
//
// One code path serves both precisions. A policy (Exact, Naive) says how a dot product accumulates
// and how an intermediate tensor is stored: in fp64 nothing is ever rounded; in same_as_inputs every
// product accumulates in fp32 and every intermediate tensor (scaled q, S, P, O, dP, dS, gradients)
// is rounded to the inputs' dtype, which is what unfused framework ops (q * scale, einsum, softmax,
// dropout, einsum) produce. FlashAttention's accuracy claim is measured against that naive error.
//
// Fast enough to check real problems, without changing a bit of any result:
// - every sum runs in the order the naive formulas give (over features for a dot product, over keys
//   for a row of P V and of dQ, over query rows for dK and dV, over the query heads of a group for a
//   KV head's dK and dV), whatever the number of threads or the block size;
// - (sequence, head) pairs, and in the forward runs of query rows, go to every core; a block of
//   rows holds at most kBlockElements of each S-shaped matrix, so S is never materialised whole;
// - the two loops that do almost all the arithmetic (dots, accumulate) keep kWidth results in
//   registers (dot products of consecutive keys side by side, over K and V transposed), and are
//   compiled for x86-64-v3 too, chosen when the library loads. FMA rounds once on every CPU and the
//   file is built without FMA contraction (CMakeLists.txt), so both builds give the same bits.
//
// Semantics (scale, mask, softcap, ALiBi, spans, offsets) all come from core/problem.h.
#include "reference.h"

#include "core/dtype.h"
#include "core/error.h"
#include "cpu/thread_pool.h"

#include <flashattn/philox.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>

namespace flashattn::reference {
namespace {

constexpr double kMinusInf = -std::numeric_limits<double>::infinity();

// fp64: every operation in double; a product and a sum round separately.
struct Exact {
    using Real = double; // the operands of dot products and weighted sums
    double store(double x) const { return x; }
    double exp(double x) const { return std::exp(x); }
    double log(double x) const { return std::log(x); }
    double add(double a, double b) const { return a + b; }
};

// same_as_inputs: products accumulate in fp32 with FMA, as a GEMM on half/bf16/fp32 inputs does;
// every stored element is rounded to the dtype, so every operand of a product is an exact float.
struct Naive {
    using Real = float;
    fa_dtype dtype;
    double store(double x) const { return double(round_to(dtype, float(x))); }
    double exp(double x) const { return double(std::exp(float(x))); }
    double log(double x) const { return double(std::log(float(x))); }
    double add(double a, double b) const { return double(float(a) + float(b)); }
};

inline double multiply_add(double a, double b, double acc) { return acc + a * b; }
inline float multiply_add(float a, float b, float acc) { return std::fma(a, b, acc); }

// ---- the two loops that do almost all the arithmetic ----------------------------------------------

// Elements of a result that the two loops below hold in registers while their inputs stream past.
constexpr int64_t kWidth = 32;

// out[j] = row . column j for j in [begin, end), each the sum over t = 0..d-1 in order that a single
// dot product makes; kWidth consecutive keys at a time run side by side. `columns` is d x stride:
// k-shaped rows transposed.
template <typename Real>
inline void dots_impl(const Real* row, const Real* columns, int64_t stride, int64_t d, int64_t begin, int64_t end,
                      Real* out) {
    int64_t j0 = begin;
    for (; j0 + kWidth <= end; j0 += kWidth) {
        Real part[kWidth] = {};
        for (int64_t t = 0; t < d; ++t) {
            const Real a = row[t];
            const Real* column = columns + t * stride + j0;
            for (int64_t j = 0; j < kWidth; ++j) part[j] = multiply_add(a, column[j], part[j]);
        }
        std::copy_n(part, kWidth, out + j0);
    }
    std::fill(out + j0, out + end, Real(0));
    for (int64_t t = 0; t < d; ++t)
        for (int64_t j = j0; j < end; ++j) out[j] = multiply_add(row[t], columns[t * stride + j], out[j]);
}

// acc += w_i * rows[i] for i = 0..count-1 in order, skipping the weights w_i = weights[i * weight_stride]
// that are 0 (as the naive code does: masked or dropped elements add nothing, not even -0 or NaN).
// kWidth elements of acc at a time stay in registers while the rows stream past; each element still
// takes its terms in order of i.
template <typename Real>
inline void accumulate_impl(const double* weights, int64_t weight_stride, const Real* rows, int64_t count, int64_t d,
                            Real* acc) {
    int64_t c0 = 0;
    for (; c0 + kWidth <= d; c0 += kWidth) {
        Real part[kWidth];
        std::copy_n(acc + c0, kWidth, part);
        for (int64_t i = 0; i < count; ++i) {
            const double w = weights[i * weight_stride];
            if (w == 0.0) continue;
            const Real* row = rows + i * d + c0;
            for (int64_t c = 0; c < kWidth; ++c) part[c] = multiply_add(Real(w), row[c], part[c]);
        }
        std::copy_n(part, kWidth, acc + c0);
    }
    if (c0 == d) return;
    for (int64_t i = 0; i < count; ++i) {
        const double w = weights[i * weight_stride];
        if (w == 0.0) continue;
        for (int64_t c = c0; c < d; ++c) acc[c] = multiply_add(Real(w), rows[i * d + c], acc[c]);
    }
}

#if defined(__GNUC__) && defined(__x86_64__) && defined(__linux__)
#define FA_REFERENCE_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define FA_REFERENCE_CLONES
#endif

FA_REFERENCE_CLONES void dots(const double* row, const double* columns, int64_t stride, int64_t d, int64_t begin,
                              int64_t end, double* out) {
    dots_impl(row, columns, stride, d, begin, end, out);
}
FA_REFERENCE_CLONES void dots(const float* row, const float* columns, int64_t stride, int64_t d, int64_t begin,
                              int64_t end, float* out) {
    dots_impl(row, columns, stride, d, begin, end, out);
}
FA_REFERENCE_CLONES void accumulate(const double* weights, int64_t weight_stride, const double* rows, int64_t count,
                                    int64_t d, double* acc) {
    accumulate_impl(weights, weight_stride, rows, count, d, acc);
}
FA_REFERENCE_CLONES void accumulate(const double* weights, int64_t weight_stride, const float* rows, int64_t count,
                                    int64_t d, float* acc) {
    accumulate_impl(weights, weight_stride, rows, count, d, acc);
}

// A block of rows against the keys each row sees (keys[r]), chunk of keys by chunk of keys, so
// that the part of K or V being read (about 256 KB) stays in cache for every row of the block. The
// order of each sum over keys is unchanged: chunks run in increasing order.
template <typename Real>
int64_t keys_per_chunk(int64_t d) {
    return std::max<int64_t>(1, (int64_t(1) << 18) / (d * int64_t(sizeof(Real))));
}

// out[r * k_len + j] = rows[r] . column j (dots()) for every row r and j in keys[r].
template <typename Real>
void block_dots(const Real* rows, int64_t count, const KeyRange* keys, const Real* columns, int64_t stride,
                int64_t d, int64_t k_len, Real* out) {
    const int64_t chunk = keys_per_chunk<Real>(d);
    for (int64_t j0 = 0; j0 < k_len; j0 += chunk)
        for (int64_t r = 0; r < count; ++r) {
            const int64_t begin = std::max(keys[r].begin, j0), end = std::min(keys[r].end, j0 + chunk);
            if (begin < end) dots(rows + r * d, columns, stride, d, begin, end, out + r * k_len);
        }
}

// acc[r] += weights[r * k_len + j] * key_rows[j] (accumulate()) for every row r, j in keys[r] in order.
template <typename Real>
void block_accumulate(const double* weights, int64_t count, const KeyRange* keys, const Real* key_rows, int64_t d,
                      int64_t k_len, Real* acc) {
    const int64_t chunk = keys_per_chunk<Real>(d);
    for (int64_t j0 = 0; j0 < k_len; j0 += chunk)
        for (int64_t r = 0; r < count; ++r) {
            const int64_t begin = std::max(keys[r].begin, j0), end = std::min(keys[r].end, j0 + chunk);
            if (begin < end)
                accumulate(weights + r * k_len + begin, 1, key_rows + begin * d, end - begin, d, acc + r * d);
        }
}

// ---- inputs --------------------------------------------------------------------------------------

// Rows [i0, i0 + count) of (sequence s, head h) of a q-shaped tensor of d columns (q: head_dim; dout:
// head_dim_v), each element times `scale` and stored (with scale 1 that is the value read: it
// already has the dtype).
template <typename Math>
std::vector<typename Math::Real> load_q_rows(const Problem& pr, const fa_tensor& t, const Span& s, int64_t h,
                                             int64_t i0, int64_t count, int64_t d, double scale, const Math& math) {
    std::vector<typename Math::Real> rows(size_t(count * d));
    for (int64_t i = 0; i < count; ++i) {
        const int64_t base = pr.q_offset(t, s, i0 + i, h);
        for (int64_t c = 0; c < d; ++c) {
            const double x = load_float(t.data, pr.p.dtype, base + c);
            rows[size_t(i * d + c)] = typename Math::Real(math.store(x * scale));
        }
    }
    return rows;
}

// K and V of one (sequence, KV head) as the products read them: as rows (k_len x d; V: k_len x
// head_dim_v) and transposed (d x stride, for dots()), only the forms asked for.
template <typename Real>
struct KeyValues {
    int64_t k_len = 0, stride = 0;
    std::vector<Real> k, v, k_t, v_t;
};

// What a pass reads of K and V: the forward K^T and V; the backward K, K^T and V^T, and V as
// well where it recomputes O (backward_with_out).
enum class Pass { forward, backward, backward_with_out };

template <typename Real>
KeyValues<Real> load_key_values(const Problem& pr, const Span& s, int64_t h_k, Pass pass) {
    KeyValues<Real> kv;
    kv.k_len = s.k_len;
    kv.stride = s.k_len;
    auto load = [&](const fa_tensor& t, std::vector<Real>* rows, std::vector<Real>* columns) {
        const int64_t d = &t == &pr.p.k ? pr.head_dim() : pr.head_dim_v();
        if (rows) rows->assign(size_t(s.k_len * d), Real(0));
        if (columns) columns->assign(size_t(d * kv.stride), Real(0));
        for (int64_t j = 0; j < s.k_len; ++j) {
            const int64_t base = pr.k_offset(t, s, j, h_k);
            for (int64_t c = 0; c < d; ++c) {
                const Real x = Real(load_float(t.data, pr.p.dtype, base + c));
                if (rows) (*rows)[size_t(j * d + c)] = x;
                if (columns) (*columns)[size_t(c * kv.stride + j)] = x;
            }
        }
    };
    const bool forward = pass == Pass::forward;
    load(pr.p.k, forward ? nullptr : &kv.k, &kv.k_t); // S = Q K^T; dQ = dS K
    load(pr.p.v, forward || pass == Pass::backward_with_out ? &kv.v : nullptr, forward ? nullptr : &kv.v_t); // O = P V; dP = dO V^T
    return kv;
}

// ---- the forward of a block of query rows -------------------------------------------------------

// Each S-shaped matrix of a block holds at most this many elements (2 MB in double).
constexpr int64_t kBlockElements = int64_t(1) << 18;
constexpr int64_t kMaxBlockRows = 64;

int64_t block_rows(int64_t k_len) {
    return std::clamp<int64_t>(kBlockElements / std::max<int64_t>(k_len, 1), 1, kMaxBlockRows);
}

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

// Everything the forward of rows [i0, i0 + rows) of one (sequence, query head) produces, kept for
// the backward. S-shaped members are rows x k_len.
template <typename Real>
struct RowBlock {
    int64_t i0 = 0, rows = 0, k_len = 0;
    std::vector<KeyRange> keys;    // per row: the keys the mask lets it see
    std::vector<Real> q_scaled;    // q * scale as stored (the backward's dK uses it)
    std::vector<double> capped;    // softcapped score before ALiBi, for its derivative
    std::vector<double> prob;      // normalised softmax P, 0 where masked
    std::vector<double> keep;      // dropout factor: 1/(1-p) kept, 0 dropped (1 without dropout)
    std::vector<double> dropped;   // P * keep: what multiplies V
    std::vector<double> lse;       // per row; -inf when the row sees no key (and there is no sink)
    std::vector<double> sink_prob; // per row: exp(sink - lse), the sink's share of the softmax (0 without)
    std::vector<double> out;       // rows x d, when asked for

    double& at(std::vector<double>& m, int64_t r, int64_t j) { return m[size_t(r * k_len + j)]; }
};

template <typename Math>
void forward_rows(const Problem& pr, const Span& s, int64_t h, const KeyValues<typename Math::Real>& kv, int64_t i0,
                  int64_t rows, bool want_out, const Math& math, RowBlock<typename Math::Real>& f,
                  Formula formula = Formula::framework) {
    using Real = typename Math::Real;
    const int64_t d = pr.head_dim(), dv = pr.head_dim_v(), q_len = s.q_len, k_len = s.k_len;
    const fa_fwd_params& p = pr.p;
    f.i0 = i0;
    f.rows = rows;
    f.k_len = k_len;
    f.q_scaled = load_q_rows(pr, p.q, s, h, i0, rows, d, double(pr.scale), math);

    const size_t cells = size_t(rows * k_len);
    f.capped.assign(cells, 0.0);
    f.prob.assign(cells, 0.0);
    f.keep.assign(cells, 0.0);
    f.dropped.assign(cells, 0.0);
    f.lse.assign(size_t(rows), kMinusInf);
    f.sink_prob.assign(size_t(rows), 0.0);
    f.keys.resize(size_t(rows));
    for (int64_t r = 0; r < rows; ++r) f.keys[size_t(r)] = pr.mask.keys_for_row(i0 + r, q_len, k_len);

    std::vector<Real> qk(cells);
    block_dots(f.q_scaled.data(), rows, f.keys.data(), kv.k_t.data(), kv.stride, d, k_len, qk.data());

    const double softcap = p.softcap;
    const double slope = pr.alibi_slope(s.batch, h);
    const DropoutPolicy dropout = DropoutPolicy::of(pr);
    // The sink is one more logit in every row's softmax, with no value (an fp32 input: exact).
    const double sink = double(pr.sink(h));
    std::vector<double> score(static_cast<size_t>(k_len)), exp_score(static_cast<size_t>(k_len));
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        const KeyRange keys = f.keys[size_t(r)];
        if (keys.empty()) { // out 0, P 0: a row that may attend to nothing; lse -inf, or the sink's
            if (pr.has_sink()) {
                f.lse[size_t(r)] = sink;
                f.sink_prob[size_t(r)] = 1.0;
            }
            continue;
        }
        double row_max = sink; // -inf without a sink
        for (int64_t j = keys.begin; j < keys.end; ++j) {
            const double raw = math.store(double(qk[size_t(r * k_len + j)]));
            f.at(f.capped, r, j) = math.store(transform_score(raw, softcap, 0.0, i, j, q_len, k_len));
            score[size_t(j)] = math.store(transform_score(raw, softcap, slope, i, j, q_len, k_len));
            row_max = std::max(row_max, score[size_t(j)]);
        }
        double denominator = 0.0;
        for (int64_t j = keys.begin; j < keys.end; ++j) {
            exp_score[size_t(j)] = math.exp(score[size_t(j)] - row_max);
            denominator = math.add(denominator, exp_score[size_t(j)]);
        }
        if (pr.has_sink()) {
            const double exp_sink = math.exp(sink - row_max);
            denominator = math.add(denominator, exp_sink);
            f.sink_prob[size_t(r)] = math.store(exp_sink / denominator);
        }
        f.lse[size_t(r)] = math.add(row_max, math.log(denominator));

        const DropoutRow rng(pr.dropout_seed(), pr.dropout_offset(), s.batch, p.num_heads, h, i);
        for (int64_t j = keys.begin; j < keys.end; ++j) {
            const double prob = formula == Formula::flash_attention
                                    ? math.store(math.exp(score[size_t(j)] - f.lse[size_t(r)]))
                                    : math.store(exp_score[size_t(j)] / denominator);
            const bool kept = !dropout.active || rng.bits_for_column(j) < dropout.threshold;
            const double keep = kept ? dropout.keep_scale : 0.0;
            f.at(f.prob, r, j) = prob;
            f.at(f.keep, r, j) = keep;
            f.at(f.dropped, r, j) = math.store(prob * keep);
        }
    }
    f.out.assign(want_out ? size_t(rows * dv) : 0, 0.0);
    if (!want_out) return;
    std::vector<Real> acc(size_t(rows * dv), Real(0));
    block_accumulate(f.dropped.data(), rows, f.keys.data(), kv.v.data(), dv, k_len, acc.data());
    for (size_t e = 0; e < acc.size(); ++e) f.out[e] = math.store(double(acc[e]));
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

// task(i) for i in [0, count), spread over the cores (FLASHATTN_NUM_THREADS, else every core this
// process may run on). Tasks write disjoint parts of the results, so the order they run in changes nothing.
template <typename Task>
void parallel_for(int64_t count, const Task& task) {
    if (count <= 0) return;
    cpu::ThreadPool pool(int(std::min<int64_t>(cpu::default_num_threads(), count)));
    pool.run(count, [](void* context, int64_t i, int) { (*static_cast<const Task*>(context))(i); },
             const_cast<Task*>(&task));
}

// Query rows [i0, i0 + rows) of one (sequence, query head): a few blocks, so that loading K and V
// for them costs little next to their products.
struct RowsTask {
    int64_t batch, head, i0, rows;
};
constexpr int64_t kBlocksPerTask = 4;

template <typename Math>
ForwardResult forward_with(const Problem& pr, const Math& math, bool want_probs, Formula formula) {
    using Real = typename Math::Real;
    const int64_t H = pr.heads(), d = pr.head_dim_v(), Sq = pr.p.seqlen_q, Sk = pr.p.seqlen_k;

    ForwardResult r;
    r.out.assign(size_t(q_rows(pr) * H * d), 0.0);
    r.lse.assign(size_t(pr.varlen ? H * pr.total_q : pr.batch() * H * Sq), kMinusInf);
    if (want_probs) r.probs.assign(size_t(pr.batch() * H * Sq * Sk), 0.0);

    std::vector<RowsTask> tasks;
    for (int64_t b = 0; b < pr.batch(); ++b) {
        const Span s = pr.span(b);
        const int64_t step = kBlocksPerTask * block_rows(s.k_len);
        for (int64_t h = 0; h < H; ++h)
            for (int64_t i0 = 0; i0 < s.q_len; i0 += step) tasks.push_back({b, h, i0, std::min(step, s.q_len - i0)});
    }
    parallel_for(int64_t(tasks.size()), [&](int64_t t) {
        const RowsTask& task = tasks[size_t(t)];
        const int64_t b = task.batch, h = task.head;
        const Span s = pr.span(b);
        const KeyValues<Real> kv = load_key_values<Real>(pr, s, pr.kv_head(h), Pass::forward);
        const int64_t step = block_rows(s.k_len);
        RowBlock<Real> f;
        for (int64_t i0 = task.i0; i0 < task.i0 + task.rows; i0 += step) {
            const int64_t rows = std::min(step, task.i0 + task.rows - i0);
            forward_rows(pr, s, h, kv, i0, rows, true, math, f, formula);
            for (int64_t row = 0; row < rows; ++row) {
                const int64_t i = i0 + row;
                r.lse[size_t(pr.lse_index(s, i, h))] = f.lse[size_t(row)];
                std::copy_n(&f.out[size_t(row * d)], d, &r.out[size_t((canonical_q_row(pr, s, i) * H + h) * d)]);
                if (!want_probs || s.k_len == 0) continue;
                double* probs = &r.probs[size_t(((b * H + h) * Sq + i) * Sk)];
                for (int64_t j = 0; j < s.k_len; ++j) {
                    const double prob = f.at(f.prob, row, j);
                    probs[j] = pr.mask.allowed(i, j, s.q_len, s.k_len) && f.at(f.keep, row, j) == 0.0 ? -prob : prob;
                }
            }
        }
    });
    return r;
}

// The gradients of one (sequence, query head): dQ straight into the results, this head's share
// of dK and dV (k_len x d and k_len x head_dim_v, stored) for backward_with to sum over the group,
// and of dsink (this sequence's rows).
template <typename Math>
void backward_head(const BwdProblem& bp, Formula formula, const Span& s, int64_t h, const Math& math, Gradients& g,
                   std::vector<double>& dk_head, std::vector<double>& dv_head, double& dsink_head,
                   double& dsink_magnitude, double& dsink_rounding) {
    using Real = typename Math::Real;
    const Problem& pr = bp.fwd;
    const int64_t H = pr.heads(), d = pr.head_dim(), dv = pr.head_dim_v(), q_len = s.q_len, k_len = s.k_len;
    const double scale = pr.scale, softcap = pr.p.softcap;
    // O as well: for D = rowsum(dO O) (Formula::flash_attention), and in the fp64 pass for dsink's
    // rounding scale.
    const bool want_out = formula == Formula::flash_attention || (pr.has_sink() && std::is_same_v<Real, double>);
    const KeyValues<Real> kv =
        load_key_values<Real>(pr, s, pr.kv_head(h), want_out ? Pass::backward_with_out : Pass::backward);

    // dK/dV of this query head, summed over every query row in order.
    std::vector<Real> acc_k(size_t(k_len * d), Real(0)), acc_v(size_t(k_len * dv), Real(0));
    dsink_head = 0.0;
    dsink_magnitude = 0.0;
    dsink_rounding = 0.0; // (its square, until the end)
    std::vector<Real> dp_raw, acc_q;
    std::vector<double> dp(static_cast<size_t>(k_len)), ds;
    RowBlock<Real> f;
    const int64_t step = block_rows(k_len);
    for (int64_t i0 = 0; i0 < q_len; i0 += step) {
        const int64_t rows = std::min(step, q_len - i0);
        forward_rows(pr, s, h, kv, i0, rows, want_out, math, f, formula);
        const std::vector<Real> dout = load_q_rows(pr, bp.p.dout, s, h, i0, rows, dv, 1.0, math);
        // dP = dO V^T (times the dropout mask and 1/(1-p)); dS = P (dP - rowsum(P dP)). The sink's
        // dP is 0 (it has no value), so rowsum(P dP) = rowsum(dO O) with or without it, and the
        // sink's own dS is p_sink (0 - rowsum(P dP)).
        dp_raw.resize(size_t(rows * k_len));
        block_dots(dout.data(), rows, f.keys.data(), kv.v_t.data(), kv.stride, dv, k_len, dp_raw.data());
        ds.assign(size_t(rows * k_len), 0.0);
        int64_t first_key = k_len, last_key = 0; // the keys any row of the block sees
        for (int64_t r = 0; r < rows; ++r) {
            const KeyRange keys = f.keys[size_t(r)];
            if (keys.empty()) continue;
            first_key = std::min(first_key, keys.begin);
            last_key = std::max(last_key, keys.end);
            double dsum = 0.0;
            for (int64_t j = keys.begin; j < keys.end; ++j) {
                if (f.at(f.prob, r, j) == 0.0) continue; // masked (or underflowed): no gradient
                dp[size_t(j)] = math.store(math.store(double(dp_raw[size_t(r * k_len + j)])) * f.at(f.keep, r, j));
                if (formula == Formula::framework) dsum = math.add(dsum, f.at(f.prob, r, j) * dp[size_t(j)]);
            }
            if (formula == Formula::flash_attention)
                for (int64_t c = 0; c < dv; ++c)
                    dsum = math.add(dsum, math.store(double(dout[size_t(r * dv + c)]) * f.out[size_t(r * dv + c)]));
            for (int64_t j = keys.begin; j < keys.end; ++j) {
                const double prob = f.at(f.prob, r, j);
                if (prob == 0.0) continue;
                double grad = math.store(prob * (dp[size_t(j)] - dsum));
                if (softcap > 0.0) {
                    const double t = f.at(f.capped, r, j) / softcap; // tanh of the uncapped score
                    grad = math.store(grad * math.store(1.0 - t * t));
                }
                ds[size_t(r * k_len + j)] = grad;
            }
            if (pr.has_sink()) {
                dsink_head = math.add(dsink_head, -math.store(f.sink_prob[size_t(r)] * dsum));
                dsink_magnitude += std::fabs(f.sink_prob[size_t(r)] * dsum);
                if constexpr (std::is_same_v<Real, double>) { // (the fp64 pass's: it has O)
                    double products = 0.0;
                    for (int64_t c = 0; c < dv; ++c)
                        products += std::pow(double(dout[size_t(r * dv + c)]) * f.out[size_t(r * dv + c)], 2);
                    dsink_rounding += std::pow(f.sink_prob[size_t(r)], 2) * products;
                }
            }
        }
        // dQ = scale * dS K (the framework's scale sits on q, so its chain rule scales dQ last).
        acc_q.assign(size_t(rows * d), Real(0));
        block_accumulate(ds.data(), rows, f.keys.data(), kv.k.data(), d, k_len, acc_q.data());
        for (int64_t r = 0; r < rows; ++r) {
            double* dq = &g.dq[size_t((canonical_q_row(pr, s, i0 + r) * H + h) * d)];
            for (int64_t c = 0; c < d; ++c) dq[c] = math.store(math.store(double(acc_q[size_t(r * d + c)])) * scale);
        }
        // dK += dS^T (q * scale), dV += (P * mask / (1-p))^T dO: this block's rows, in order.
        for (int64_t j = first_key; j < last_key; ++j) {
            accumulate(&ds[size_t(j)], k_len, f.q_scaled.data(), rows, d, &acc_k[size_t(j * d)]);
            accumulate(&f.dropped[size_t(j)], k_len, dout.data(), rows, dv, &acc_v[size_t(j * dv)]);
        }
    }
    dk_head.resize(size_t(k_len * d));
    dv_head.resize(size_t(k_len * dv));
    for (size_t e = 0; e < dk_head.size(); ++e) dk_head[e] = math.store(double(acc_k[e]));
    for (size_t e = 0; e < dv_head.size(); ++e) dv_head[e] = math.store(double(acc_v[e]));
}

template <typename Math>
Gradients backward_with(const BwdProblem& bp, Formula formula, const Math& math) {
    const Problem& pr = bp.fwd;
    const int64_t H = pr.heads(), Hk = pr.p.num_heads_k, d = pr.head_dim(), dv = pr.head_dim_v(), group = pr.group;

    Gradients g;
    g.dq.assign(size_t(q_rows(pr) * H * d), 0.0);
    g.dk.assign(size_t(k_rows(pr) * Hk * d), 0.0);
    g.dv.assign(size_t(k_rows(pr) * Hk * dv), 0.0);

    // One task per (sequence, query head): task b * H + h.
    std::vector<std::vector<double>> dk_heads(size_t(pr.batch() * H)), dv_heads(dk_heads.size());
    std::vector<double> dsink_parts(dk_heads.size(), 0.0), dsink_magnitudes(dk_heads.size(), 0.0),
        dsink_roundings(dk_heads.size(), 0.0);
    parallel_for(pr.batch() * H, [&](int64_t t) {
        const int64_t b = t / H, h = t % H;
        backward_head(bp, formula, pr.span(b), h, math, g, dk_heads[size_t(t)], dv_heads[size_t(t)], dsink_parts[size_t(t)],
                      dsink_magnitudes[size_t(t)], dsink_roundings[size_t(t)]);
    });
    // dsink of each head: the sequences' shares added in batch order.
    if (pr.has_sink()) {
        g.dsink.assign(size_t(H), 0.0);
        g.dsink_magnitude.assign(size_t(H), 0.0);
        g.dsink_rounding.assign(size_t(H), 0.0);
        for (int64_t h = 0; h < H; ++h)
            for (int64_t b = 0; b < pr.batch(); ++b) {
                g.dsink[size_t(h)] = math.store(math.add(g.dsink[size_t(h)], dsink_parts[size_t(b * H + h)]));
                g.dsink_magnitude[size_t(h)] += dsink_magnitudes[size_t(b * H + h)];
                g.dsink_rounding[size_t(h)] += dsink_roundings[size_t(b * H + h)];
            }
    }
    for (double& r : g.dsink_rounding) r = std::sqrt(r);
    // dK/dV of each KV head: the query heads' shares added in head order (a framework's
    // repeat_interleave backward), then stored.
    for (int64_t b = 0; b < pr.batch(); ++b) {
        const Span s = pr.span(b);
        for (int64_t hk = 0; hk < Hk; ++hk)
            for (int64_t j = 0; j < s.k_len; ++j) {
                // dK, then dV: each element summed over the group's heads in head order
                for (auto [width, heads, result] : {std::tuple{d, &dk_heads, &g.dk}, std::tuple{dv, &dv_heads, &g.dv}})
                    for (int64_t c = 0; c < width; ++c) {
                        double sum = 0.0;
                        for (int64_t h = hk * group; h < (hk + 1) * group; ++h)
                            sum = math.add(sum, (*heads)[size_t(b * H + h)][size_t(j * width + c)]);
                        (*result)[size_t((canonical_k_row(pr, s, j) * Hk + hk) * width + c)] = math.store(sum);
                    }
            }
    }
    return g;
}

} // namespace

ForwardResult forward(const Problem& pr, Precision precision, bool want_probs, Formula formula) {
    check_readable(pr);
    if (precision == Precision::fp64) return forward_with(pr, Exact{}, want_probs, formula);
    return forward_with(pr, Naive{pr.p.dtype}, want_probs, formula);
}

Gradients backward(const BwdProblem& bp, Precision precision, Formula formula) {
    check_readable(bp.fwd);
    if (precision == Precision::fp64) return backward_with(bp, formula, Exact{});
    return backward_with(bp, formula, Naive{bp.fwd.p.dtype});
}

namespace {

// Of two naive results, the one further from `exact` (equal values, infinities included, differ by
// 0; a NaN on either side by infinity).
const std::vector<double>& further(const std::vector<double>& a, const std::vector<double>& b,
                                   const std::vector<double>& exact) {
    auto error = [&](const std::vector<double>& x) {
        if (x.size() != exact.size()) return std::numeric_limits<double>::infinity();
        double worst = 0.0;
        for (size_t i = 0; i < x.size(); ++i) {
            const double diff = x[i] == exact[i] ? 0.0 : std::fabs(x[i] - exact[i]);
            worst = std::isnan(diff) ? std::numeric_limits<double>::infinity() : std::max(worst, diff);
        }
        return worst;
    };
    return error(b) > error(a) ? b : a;
}

} // namespace

ForwardResult naive_yardstick(const Problem& problem, bool want_probs, const ForwardResult& exact) {
    const ForwardResult framework = forward(problem, Precision::same_as_inputs, want_probs);
    const ForwardResult flash = forward(problem, Precision::same_as_inputs, want_probs, Formula::flash_attention);
    ForwardResult naive = framework;
    naive.out = further(framework.out, flash.out, exact.out);
    naive.probs = further(framework.probs, flash.probs, exact.probs);
    return naive;
}

Gradients naive_yardstick(const BwdProblem& problem, const Gradients& exact) {
    const Gradients framework = backward(problem, Precision::same_as_inputs);
    const Gradients flash = backward(problem, Precision::same_as_inputs, Formula::flash_attention);
    Gradients naive;
    naive.dq = further(framework.dq, flash.dq, exact.dq);
    naive.dk = further(framework.dk, flash.dk, exact.dk);
    naive.dv = further(framework.dv, flash.dv, exact.dv);
    naive.dsink = further(framework.dsink, flash.dsink, exact.dsink);
    return naive;
}

double unit_roundoff(fa_dtype dtype) { return dtype == FA_FLOAT32 ? 0x1p-24 : dtype == FA_FLOAT16 ? 0x1p-11 : 0x1p-8; }

namespace {

// A row of d elements (head_dim; values: head_dim_v) at `offset`, rotated to `position` (rotary on)
// and rounded to the dtype.
void rotated_row_into(const fa_kvcache_params& p, const void* src, int64_t src_offset, void* dst, int64_t dst_offset,
                      int64_t d, bool rotate, int64_t position) {
    const fa_dtype dtype = p.fwd.dtype;
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
                                     f.k.data, kp.cache_offset(f.k, b, i, h_k), f.head_dim, kp.rotary(),
                                     kp.new_row(b, i));
                    rotated_row_into(p, p.v_new.data,
                                     b * p.v_new.batch_stride + i * p.v_new.row_stride + h_k * p.v_new.head_stride,
                                     f.v.data, kp.cache_offset(f.v, b, i, h_k), f.head_dim_v, false, 0);
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
                                     d, true, kp.query_position(b, i));
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
