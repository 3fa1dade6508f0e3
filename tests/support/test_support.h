// What every test needs: strided tensors in any dtype, NaN-poisoned outputs, a problem description
// (`Case`) turned into real buffers and a call of the C ABI (`AttentionRun`), and FlashAttention's tolerance
// rule against the fp64 reference.
//
// The tolerance rule (the one FlashAttention's own tests use): an optimised kernel is as accurate as
// it should be when its distance to the fp64 reference is at most a small multiple of the distance
// a naive same-precision implementation has, i.e.
//     max|ours - fp64| <= factor * max|naive same-precision - fp64| + floor
// with factor 2 for the forward outputs and 3 for the gradients, and a tiny floor for the cases where
// the naive error is (almost) zero, e.g. a single key.
#pragma once

#include "core/problem.h"
#include "reference/reference.h"

#include <flashattn/flashattn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace flashattn::testing {

// ---------------------------------------------------------------------------------------------
// Where a call runs; CUDA cases keep host copies of every buffer and mirror them on the device.
enum class Backend { cpu, cuda };
const char* backend_name(Backend backend);
fa_backend to_fa_backend(Backend backend);

// Skips the current test (with a message saying why) when the backend cannot run here.
#define FA_SKIP_IF_UNAVAILABLE(backend)                                                               \
    do {                                                                                              \
        if ((backend) == ::flashattn::testing::Backend::cuda && !fa_cuda_available())                 \
            GTEST_SKIP() << "CUDA backend not available (fa_cuda_available() == 0: not built with "    \
                            "-DFLASHATTN_CUDA=ON, or no usable device)";                              \
    } while (0)

// ---------------------------------------------------------------------------------------------
// Strided (batch, rows, heads, head_dim) tensors.
enum class Layout {
    bshd,        // contiguous (batch, seqlen, heads, head_dim): the flash_attn layout
    bhsd,        // (batch, heads, seqlen, head_dim) memory viewed as bshd: rows are not adjacent
    padded,      // every dimension padded (head_dim + 3, then +5 per row, +7 per batch): no two
                 // dimensions are adjacent and there are gaps that must stay untouched
};
const char* layout_name(Layout layout);

class Tensor {
public:
    Tensor() = default;
    // `broadcast_batch`: every batch is the same memory (batch_stride 0), as an expanded input is.
    Tensor(fa_dtype dtype, int64_t batch, int64_t rows, int64_t heads, int64_t dim, Layout layout,
           bool broadcast_batch = false);

    fa_dtype dtype() const { return dtype_; }
    int64_t batch() const { return batch_; }
    int64_t rows() const { return rows_; }
    int64_t heads() const { return heads_; }
    int64_t dim() const { return dim_; }
    size_t bytes() const { return storage_.size(); }
    void* data() { return storage_.data(); }
    const void* data() const { return storage_.data(); }

    // The view to put in fa_fwd_params. The varlen view carries a negative batch_stride: the packed
    // entry points must ignore it, and this proves they do.
    fa_tensor view() const;
    fa_tensor varlen_view() const;

    int64_t offset(int64_t b, int64_t s, int64_t h, int64_t c) const {
        return b * batch_stride_ + s * row_stride_ + h * head_stride_ + c;
    }
    float get(int64_t b, int64_t s, int64_t h, int64_t c) const;
    void set(int64_t b, int64_t s, int64_t h, int64_t c, float value);

    // Every element of the view: normal(0, stddev), rounded to the dtype. Gaps keep the sentinel.
    void fill_normal(std::mt19937_64& rng, double stddev = 1.0);
    // Multiples of 2^-6 in [-2, 2]: exact in every dtype, and x +- 2^-12 still exact in fp32
    // (what the finite-difference checks need).
    void fill_coarse(std::mt19937_64& rng);
    // NaN in every element of the view, a different NaN ("sentinel") in every gap.
    void poison();
    // True when every gap still holds the sentinel, i.e. nothing wrote outside the view.
    bool gaps_intact() const;

    // The view's elements in canonical (batch, rows, heads, dim) order, as doubles.
    std::vector<double> canonical() const;

private:
    std::vector<int64_t> gap_offsets() const;

    fa_dtype dtype_ = FA_FLOAT32;
    int64_t batch_ = 0, rows_ = 0, heads_ = 0, dim_ = 0;
    int64_t batch_stride_ = 0, row_stride_ = 0, head_stride_ = 0;
    std::vector<unsigned char> storage_;
};

// ---------------------------------------------------------------------------------------------
// One attention problem, described by what it is.
enum class Alibi { none, per_head, per_batch_and_head };

// Draws for randomly generated test problems (fixed seeds): an element of a list, a coin that
// comes up with probability p, an integer in [lo, hi].
struct RandomDraws {
    std::mt19937_64& rng;
    template <typename T>
    T pick(const std::vector<T>& options) { return options[rng() % options.size()]; }
    bool chance(double p) { return std::uniform_real_distribution<double>(0.0, 1.0)(rng) < p; }
    int between(int lo, int hi) { return lo + int(rng() % uint64_t(hi - lo + 1)); }
};

struct Case {
    std::string name;
    Backend backend = Backend::cpu;
    fa_dtype dtype = FA_FLOAT16;
    int batch = 2, seqlen_q = 64, seqlen_k = 64, heads = 2, heads_k = 2, head_dim = 64;
    int head_dim_v = 0;         // of v, out, dout, dv; 0 = head_dim
    bool learnable_sink = false; // one random fp32 sink logit per query head (and dsink in the backward)
    double sink_mean = 0.0;     // the sinks are normal(sink_mean, 1)
    float softmax_scale = 0.0f;
    bool causal = false;
    int window_left = -1, window_right = -1;
    float softcap = 0.0f;
    Alibi alibi = Alibi::none;
    float dropout_p = 0.0f;
    Layout layout = Layout::bshd;
    bool want_probs = false;
    bool with_lse = true;       // forward: pass softmax_lse (the backward always needs it)
    // varlen: per-sequence lengths (batch = q_lens.size()); seqlen_q/k become the maxima.
    bool varlen = false;
    std::vector<int> q_lens, k_lens;
    int spare_rows = 0;         // varlen: total_q/total_k exceed the last cu_seqlens by this much
    std::vector<int> seqused_k; // optional, dense or varlen
    double input_stddev = 1.0;  // of q, k, v (and dout): larger means peakier softmax rows
    bool kv_batch_broadcast = false; // dense: k and v have batch_stride 0 (one set shared by the batch)
    bool deterministic = true;
    uint64_t seed = 1;          // inputs
    uint64_t rng_seed = 0x5eed, rng_offset = 0; // dropout
    bool rng_in_memory = false; // pass (rng_seed, rng_offset) through fa_fwd_params.rng_state instead
    int num_splits = 1;
};

// Human-readable summary, e.g. "fp16 b2 h6/2 sq113 sk203 d59 causal softcap30 bhsd cpu".
std::string describe(const Case& c);
// How gtest prints a case or a backend in its messages.
void PrintTo(const Case& c, std::ostream* os);
void PrintTo(Backend backend, std::ostream* os);

// Makes a string usable as a gtest parameter name (letters, digits, underscore).
std::string sanitize_name(const std::string& name);

const char* dtype_short(fa_dtype dtype);

// The buffers of one case and the C ABI calls on them. Outputs are poisoned before every call.
class AttentionRun {
public:
    explicit AttentionRun(const Case& c);

    const Case& c() const { return case_; }
    fa_fwd_params fwd_params() const;  // host pointers; the AttentionRun translates them for CUDA
    fa_bwd_params bwd_params() const;
    Problem problem() const;           // validated, host pointers: what the reference reads
    BwdProblem bwd_problem() const;

    fa_status forward();               // poisons out/lse/probs, calls fa_forward or fa_varlen_forward
    fa_status backward();              // poisons dq/dk/dv, calls fa_backward or fa_varlen_backward
    std::string last_error() const { return last_error_; }
    // Empty when no call wrote to any of its inputs; else says which input changed.
    const std::string& input_damage() const { return input_damage_; }

    // Inputs and outputs.
    Tensor q, k, v, out, dout, dq, dk, dv;
    std::vector<float> lse, probs, alibi_slopes;
    std::vector<float> sink, dsink; // (heads) with learnable_sink
    std::vector<int32_t> cu_seqlens_q, cu_seqlens_k, seqused_k;
    std::vector<uint64_t> rng_state; // {rng_seed, rng_offset} when the case passes them in memory
    int64_t total_q = 0, total_k = 0;

    // Which canonical rows of q-shaped / k-shaped tensors belong to a sequence (varlen with spare
    // rows leaves some rows to nobody; those outputs are unspecified and not compared).
    std::vector<bool> q_row_used, k_row_used;
    // Which lse entries belong to a query row of some sequence.
    std::vector<bool> lse_used;

private:
    fa_status call_forward(const fa_fwd_params& p);
    fa_status call_backward(const fa_bwd_params& p);

    Case case_;
    std::string last_error_;
    std::string input_damage_;
};

// ---------------------------------------------------------------------------------------------
// Comparisons.

// Where two arrays differ most. NaN anywhere counts as an infinite difference.
struct Deviation {
    double max_abs = 0.0;
    int64_t index = -1;
    double ours = 0.0, reference = 0.0;
};
// `used` (optional, one entry per element) restricts the comparison.
Deviation max_deviation(const std::vector<double>& ours, const std::vector<double>& reference,
                        const std::vector<bool>* used = nullptr);

double max_abs(const std::vector<double>& values);

// The value head dim of a case (head_dim_v, or head_dim when 0).
inline int value_dim(const Case& c) { return c.head_dim_v > 0 ? c.head_dim_v : c.head_dim; }

struct Rule {
    double factor;  // 2 for outputs, 3 for gradients
    double floor;   // absolute, already scaled to the quantity's magnitude
};
// Floor for a quantity of this dtype whose reference values reach `magnitude`.
double tolerance_floor(fa_dtype dtype, double magnitude);

// gtest assertion: ours within factor * naive error + floor of the fp64 reference. `what` names the
// quantity, `shape` explains the canonical index in the failure message ((rows, heads, dim)...).
::testing::AssertionResult within_tolerance(const char* what, const std::vector<double>& ours,
                                            const std::vector<double>& fp64, const std::vector<double>& naive,
                                            double factor, fa_dtype dtype, const std::vector<bool>* used,
                                            const std::vector<int64_t>& shape);

// Expands a per-row mask to per-element for a (rows, heads, dim) canonical array.
std::vector<bool> expand_rows(const std::vector<bool>& rows, int64_t per_row);

// Floats to doubles.
std::vector<double> to_double(const std::vector<float>& values);

// Checks that every written output element is finite (lse may be -inf) and no gap was touched.
::testing::AssertionResult all_written(const char* what, const Tensor& t, const std::vector<bool>* rows_used);

// Full checks of a run against the reference (gtest failures, non-fatal): tolerance rule, every
// output element written, no gap written, no input modified.
void expect_forward_matches_reference(AttentionRun& run);
void expect_backward_matches_reference(AttentionRun& run);

uint64_t seed_from(const std::string& text);

} // namespace flashattn::testing
