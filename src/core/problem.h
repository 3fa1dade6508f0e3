// The attention problem after validation, and the semantics every backend shares.
//
// Backends and the reference never read fa_fwd_params directly for anything this file derives
// (scale, window, sequence bounds, masks, score transform, ALiBi, offsets): that way "what attention
// means" is written once, and the CPU backend, the CUDA kernels and the fp64 reference cannot drift.
#pragma once

#include <flashattn/flashattn.h>

#include <cmath>
#include <cstdint>
#include <limits>

#if defined(__CUDACC__)
#define FA_HD __host__ __device__ __forceinline__
#else
#define FA_HD inline
#endif

namespace flashattn {

// One sequence of the batch: its lengths and where its rows start in the (possibly packed) tensors.
struct Span {
    int64_t batch;        // sequence index
    int64_t q_len, k_len; // k_len already limited by seqused_k
    int64_t q_row0, k_row0; // first row in packed (varlen) tensors; 0 otherwise
};

// Which key columns query row i may see: j in [begin, end). Empty when begin >= end.
struct KeyRange {
    int64_t begin, end;
    FA_HD bool empty() const { return begin >= end; }
};

// The mask as a pure function of (row, column, lengths): causal is window (left, 0); both are
// aligned to the bottom-right corner, i.e. query row i sits at key position i + k_len - q_len.
struct MaskSpec {
    int64_t window_left;  // < 0: unbounded
    int64_t window_right; // < 0: unbounded

    FA_HD KeyRange keys_for_row(int64_t i, int64_t q_len, int64_t k_len) const {
        const int64_t diagonal = i + k_len - q_len;
        int64_t begin = 0, end = k_len;
        if (window_left >= 0 && diagonal - window_left > begin) begin = diagonal - window_left;
        if (window_right >= 0 && diagonal + window_right + 1 < end) end = diagonal + window_right + 1;
        return KeyRange{begin, end};
    }
    FA_HD bool allowed(int64_t i, int64_t j, int64_t q_len, int64_t k_len) const {
        const KeyRange r = keys_for_row(i, q_len, k_len);
        return j >= r.begin && j < r.end;
    }
    FA_HD bool is_local() const { return window_left >= 0 || window_right >= 0; }
};

// softcap and ALiBi applied to a scaled score s = scale * q.k, in the order flash_attn applies them.
template <typename T>
FA_HD T transform_score(T scaled, T softcap, T alibi_slope, int64_t i, int64_t j, int64_t q_len,
                        int64_t k_len) {
    T s = scaled;
    if (softcap > T(0)) s = softcap * tanh(s / softcap);
    if (alibi_slope != T(0)) {
        const int64_t distance = i + k_len - q_len - j;
        s -= alibi_slope * T(distance < 0 ? -distance : distance);
    }
    return s;
}

struct Problem {
    fa_fwd_params p;       // validated copy of the caller's parameters
    bool varlen;
    float scale;           // softmax_scale resolved (0 -> 1/sqrt(d))
    float scale_log2;      // scale * log2(e): exp(x*scale) == exp2(x*scale_log2)
    int64_t group;         // query heads per KV head
    MaskSpec mask;
    int64_t total_q;       // rows of the packed q/out (varlen), else batch*seqlen_q

    int64_t batch() const { return p.batch; }
    int64_t heads() const { return p.num_heads; }
    int64_t head_dim() const { return p.head_dim; }
    bool has_dropout() const { return p.dropout_p > 0.0f; }

    Span span(int64_t b) const {
        Span s{b, p.seqlen_q, p.seqlen_k, 0, 0};
        if (varlen) {
            s.q_row0 = p.cu_seqlens_q[b];
            s.k_row0 = p.cu_seqlens_k[b];
            s.q_len = p.cu_seqlens_q[b + 1] - s.q_row0;
            s.k_len = p.cu_seqlens_k[b + 1] - s.k_row0;
        }
        if (p.seqused_k) s.k_len = p.seqused_k[b];
        return s;
    }

    int64_t kv_head(int64_t h) const { return h / group; }

    // Element offset of (row i of sequence s, head h) in a q-shaped or k-shaped tensor.
    int64_t q_offset(const fa_tensor& t, const Span& s, int64_t i, int64_t h) const {
        return varlen ? (s.q_row0 + i) * t.row_stride + h * t.head_stride
                      : s.batch * t.batch_stride + i * t.row_stride + h * t.head_stride;
    }
    int64_t k_offset(const fa_tensor& t, const Span& s, int64_t j, int64_t h_k) const {
        return varlen ? (s.k_row0 + j) * t.row_stride + h_k * t.head_stride
                      : s.batch * t.batch_stride + j * t.row_stride + h_k * t.head_stride;
    }
    // Index into softmax_lse: (batch, heads, seqlen_q), or (heads, total_q) for varlen.
    int64_t lse_index(const Span& s, int64_t i, int64_t h) const {
        return varlen ? h * total_q + s.q_row0 + i : (s.batch * p.num_heads + h) * p.seqlen_q + i;
    }
    float alibi_slope(int64_t b, int64_t h) const {
        return p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.0f;
    }
};

struct BwdProblem {
    Problem fwd;
    fa_bwd_params p;
};

// Validate the caller's parameters and derive a Problem; throws flashattn::Error naming the bad
// argument. `varlen` says which entry point was called. These read no tensor memory, so they work
// on device pointers too.
Problem make_problem(const fa_fwd_params* params, bool varlen, const char* what = "params");
BwdProblem make_bwd_problem(const fa_bwd_params* params, bool varlen);

// Check the contents of cu_seqlens_q/k, seqused_k and alibi_slopes; only for host-readable memory.
void check_sequence_arrays(const Problem& problem);

} // namespace flashattn
