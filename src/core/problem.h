// The attention problem after validation, and the semantics every backend shares.
//
// Backends and the reference never read fa_fwd_params directly for anything this file derives
// (scale, window, sequence bounds, masks, score transform, ALiBi, offsets): that way "what attention
// means" is written once, and the CPU backend, the CUDA kernels and the fp64 reference cannot drift.
#pragma once

#include <flashattn/flashattn.h>

#include <cmath>
#include <cstddef>
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
    int64_t q_len, k_len; // k_len already limited by seqused_k (KV cache: cache_seqlens + seqlen_new - leftpad)
    int64_t q_row0, k_row0; // first row in packed (varlen) tensors; KV cache: cache_leftpad; paged: row in the table
    int64_t k_batch = 0;  // batch entry of k/v (KV cache: cache_batch_idx[b]; else the sequence index)
};

// Where the keys and values of a sequence live when they are not simply rows of (batch, seqlen_k):
// pages of a block pool, an entry of a larger cache, after left padding, up to a cache length.
struct KvLayout {
    const int32_t* block_table = nullptr; // paged: int32 (batch, block_table_stride)
    int64_t block_table_stride = 0;
    int64_t page_size = 0;
    int64_t num_blocks = 0;
    const int32_t* cache_batch_idx = nullptr; // KV cache: cache entry of each sequence
    const int32_t* cache_leftpad = nullptr;   // KV cache: first valid row of each sequence
    const int32_t* cache_seqlens = nullptr;   // KV cache: rows before appending
    int64_t seqlen_new = 0;                   // KV cache: rows appended
    int64_t cache_entries = 0;                // KV cache, contiguous: batch entries of k/v (batch_cache)

    FA_HD bool paged() const { return block_table != nullptr; }
};

// Rotary embedding as every backend computes it, in fp32 with one rounding per fused operation (so
// that a rotated key stored in the cache is bit-identical across backends and the reference):
// feature pairs (a, b) of the first rotary_dim features turn by the angle whose cosine and sine are
// cos_row[t], sin_row[t]: interleaved pairs (2t, 2t+1) (GPT-J), else (t, t + rotary_dim/2) (GPT-NeoX).
FA_HD void rotate_features(float* x, const float* cos_row, const float* sin_row, int64_t rotary_dim,
                           bool interleaved) {
    const int64_t half = rotary_dim / 2;
    for (int64_t t = 0; t < half; ++t) {
        const int64_t a = interleaved ? 2 * t : t;
        const int64_t b = interleaved ? 2 * t + 1 : t + half;
        const float x1 = x[a], x2 = x[b], c = cos_row[t], s = sin_row[t];
        x[a] = fmaf(x1, c, -(x2 * s));
        x[b] = fmaf(x1, s, x2 * c);
    }
}

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

// The earlier layouts of fa_fwd_params, each a prefix of today's: 0.1.0's, before the block table
// fields were appended, the paged one, before rng_state was, and the one before head_dim_v and
// learnable_sink. fa_bwd_params embeds fa_fwd_params, so in each earlier fa_bwd_params everything
// after its fwd member sat that much earlier (every size is a multiple of 8, so that tail kept its
// own layout), and that tail ended before dsink. Callers built against an earlier header pass these
// struct_sizes; the fields they do not have take their defaults.
constexpr size_t kFwdParamsSize_0_1 = offsetof(fa_fwd_params, block_table);
constexpr size_t kFwdParamsSize_paged = offsetof(fa_fwd_params, rng_state);
constexpr size_t kFwdParamsSize_rng = offsetof(fa_fwd_params, head_dim_v);
// fa_bwd_params' fields after fwd as every earlier header had them (up to workspace_size).
constexpr size_t kBwdTailSize_before_dsink = offsetof(fa_bwd_params, dsink) - offsetof(fa_bwd_params, dout);
constexpr size_t bwd_params_size_with(size_t fwd_size) {
    return offsetof(fa_bwd_params, fwd) + fwd_size + kBwdTailSize_before_dsink;
}
constexpr size_t kBwdParamsSize_0_1 = bwd_params_size_with(kFwdParamsSize_0_1);
constexpr size_t kBwdParamsSize_paged = bwd_params_size_with(kFwdParamsSize_paged);
constexpr size_t kBwdParamsSize_rng = bwd_params_size_with(kFwdParamsSize_rng);
static_assert(sizeof(fa_fwd_params) % 8 == 0 && kFwdParamsSize_0_1 % 8 == 0 && kFwdParamsSize_paged % 8 == 0 &&
                  kFwdParamsSize_rng % 8 == 0 && kBwdTailSize_before_dsink % 8 == 0,
              "fa_bwd_params' tail must not move");

// fa_kvcache_params (added with the block table) embeds fa_fwd_params too, and its fields after fwd
// have not changed since the workspace fields were appended. Its earlier layouts: before head_dim_v
// (the rng_state fwd member, everything after it that much earlier), before the workspace fields
// (the same fwd member, no workspace) and before rng_state (a shorter fwd member, no workspace).
constexpr size_t kvcache_params_size_with(size_t fwd_size, bool workspace) {
    return (workspace ? sizeof(fa_kvcache_params) : offsetof(fa_kvcache_params, workspace)) -
           (sizeof(fa_fwd_params) - fwd_size);
}
constexpr size_t kKvCacheParamsSize_rng = kvcache_params_size_with(kFwdParamsSize_rng, true);
constexpr size_t kKvCacheParamsSize_before_workspace = kvcache_params_size_with(kFwdParamsSize_rng, false);
constexpr size_t kKvCacheParamsSize_paged = kvcache_params_size_with(kFwdParamsSize_paged, false);
// The size of the fwd member inside an fa_kvcache_params of struct_size size; 0 = no known layout.
constexpr size_t fwd_params_size_in_kvcache(size_t size) {
    return size == sizeof(fa_kvcache_params)                     ? sizeof(fa_fwd_params)
           : size == kKvCacheParamsSize_rng || size == kKvCacheParamsSize_before_workspace ? kFwdParamsSize_rng
           : size == kKvCacheParamsSize_paged                    ? kFwdParamsSize_paged
                                                                 : 0;
}
constexpr bool known_kvcache_params_size(size_t size) { return fwd_params_size_in_kvcache(size) != 0; }
static_assert(offsetof(fa_kvcache_params, batch_cache) == offsetof(fa_kvcache_params, fwd) + sizeof(fa_fwd_params),
              "fa_kvcache_params' tail must follow fwd directly");

// Whether size is one of the fa_fwd_params layouts this library reads.
constexpr bool known_fwd_params_size(size_t size) {
    return size == sizeof(fa_fwd_params) || size == kFwdParamsSize_rng || size == kFwdParamsSize_paged ||
           size == kFwdParamsSize_0_1;
}
// The size of the fwd member inside an fa_bwd_params of struct_size size; 0 = no known layout.
constexpr size_t fwd_params_size_in_bwd(size_t size) {
    return size == sizeof(fa_bwd_params)   ? sizeof(fa_fwd_params)
           : size == kBwdParamsSize_rng   ? kFwdParamsSize_rng
           : size == kBwdParamsSize_paged ? kFwdParamsSize_paged
           : size == kBwdParamsSize_0_1   ? kFwdParamsSize_0_1
                                          : 0;
}

struct Problem {
    fa_fwd_params p;       // validated copy of the caller's parameters; head_dim_v resolved (0 -> head_dim)
    bool varlen;
    float scale;           // softmax_scale resolved (0 -> 1/sqrt(d))
    float scale_log2;      // scale * log2(e): exp(x*scale) == exp2(x*scale_log2)
    int64_t group;         // query heads per KV head
    MaskSpec mask;
    int64_t total_q;       // rows of the packed q/out (varlen), else batch*seqlen_q
    KvLayout kv;           // paged K/V, KV-cache addressing; default: plain rows

    int64_t batch() const { return p.batch; }
    int64_t heads() const { return p.num_heads; }
    int64_t head_dim() const { return p.head_dim; }     // of q and k
    int64_t head_dim_v() const { return p.head_dim_v; } // of v and out (resolved: never 0 here)
    bool has_sink() const { return p.learnable_sink != nullptr; }
    // The sink logit of query head h (natural-log units); -inf without sinks, the neutral term of a
    // softmax denominator (exp(-inf) = 0), so code may add it unconditionally. Host memory only
    // (the CPU backend, the reference).
    float sink(int64_t h) const { return p.learnable_sink ? p.learnable_sink[h] : -INFINITY; }
    bool has_dropout() const { return p.dropout_p > 0.0f; }
    // Dropout's Philox key on the host (the CPU backend, the reference): rng_state, host memory
    // there, read when the work runs, else the by-value fields. The CUDA kernels read rng_state
    // themselves (device memory), at their start.
    uint64_t dropout_seed() const { return p.rng_state ? p.rng_state[0] : p.rng_seed; }
    uint64_t dropout_offset() const { return p.rng_state ? p.rng_state[1] : p.rng_offset; }

    Span span(int64_t b) const {
        Span s{b, p.seqlen_q, p.seqlen_k, 0, 0, b};
        if (varlen) {
            s.q_row0 = p.cu_seqlens_q[b];
            s.k_row0 = p.cu_seqlens_k[b];
            s.q_len = p.cu_seqlens_q[b + 1] - s.q_row0;
            s.k_len = p.cu_seqlens_k[b + 1] - s.k_row0;
        }
        if (kv.paged()) s.k_row0 = 0; // the table, not cu_seqlens_k, says where the rows are
        if (kv.cache_seqlens) s.k_len = kv.cache_seqlens[b] + kv.seqlen_new;
        if (kv.cache_batch_idx) s.k_batch = kv.cache_batch_idx[b];
        if (kv.cache_leftpad) {
            s.k_row0 += kv.cache_leftpad[b];
            s.k_len -= kv.cache_leftpad[b];
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
        const int64_t row = s.k_row0 + j;
        if (kv.paged()) {
            const int64_t block = kv.block_table[s.batch * kv.block_table_stride + row / kv.page_size];
            return block * t.batch_stride + (row % kv.page_size) * t.row_stride + h_k * t.head_stride;
        }
        return (varlen ? 0 : s.k_batch * t.batch_stride) + row * t.row_stride + h_k * t.head_stride;
    }
    // Rows from key j of s on that are row_stride apart in memory (paged: up to the end of the page).
    int64_t k_rows_in_step(const Span& s, int64_t j) const {
        return kv.paged() ? kv.page_size - (s.k_row0 + j) % kv.page_size : std::numeric_limits<int64_t>::max();
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

// Attention over a KV cache (fa_kvcache_forward): `attention` is the attention over the caches as
// they are after appending (its kv layout gives each sequence's rows), with q as the caller passed
// it; the backend appends, rotates q if asked, then runs `attention` with the rotated q.
struct KvCacheProblem {
    Problem attention;
    fa_kvcache_params p; // validated copy; p.fwd is attention.p

    bool appends() const { return p.k_new.data != nullptr; }
    bool rotary() const { return p.rotary_cos != nullptr; }
    // Cache row (counted from row 0 of the sequence's cache, leftpad included) of new token i;
    // it is also that key's rotary position.
    int64_t new_row(int64_t b, int64_t i) const { return p.cache_seqlens[b] + i; }
    // Rotary position of query row i: its own row when causal or local (flash_attn's rule), else
    // every query sits at the end of the cache as it was before appending.
    int64_t query_position(int64_t b, int64_t i) const {
        return p.cache_seqlens[b] + (attention.mask.is_local() ? i : 0);
    }
    // Element offset of (new token i of sequence b, KV head h) in the cache tensor t (k or v).
    int64_t cache_offset(const fa_tensor& t, int64_t b, int64_t i, int64_t h_k) const {
        Span s = attention.span(b);
        // k_offset counts from k_row0 (leftpad); the new rows are counted from the cache's row 0.
        return attention.k_offset(t, s, new_row(b, i) - s.k_row0, h_k);
    }
};

// fa_combine after validation.
struct CombineProblem {
    fa_combine_params p;
    // Offsets of element (split, b, i, h, 0) / (split, b, h, i).
    int64_t partial_offset(int64_t split, int64_t b, int64_t i, int64_t h) const {
        return split * p.out_partial_split_stride + b * p.out_partial.batch_stride + i * p.out_partial.row_stride +
               h * p.out_partial.head_stride;
    }
    int64_t partial_lse_offset(int64_t split, int64_t b, int64_t i, int64_t h) const {
        return split * p.lse_partial_split_stride + b * p.lse_partial.batch_stride + h * p.lse_partial.head_stride +
               i * p.lse_partial.row_stride;
    }
};

// Validate the caller's parameters and derive a Problem; throws flashattn::Error naming the bad
// argument. `varlen` says which entry point was called. These read no tensor memory, so they work
// on device pointers too.
Problem make_problem(const fa_fwd_params* params, bool varlen, const char* what = "params");
BwdProblem make_bwd_problem(const fa_bwd_params* params, bool varlen);

// Check the contents of cu_seqlens_q/k, seqused_k, alibi_slopes and the block table entries a
// sequence will read; only for host-readable memory.
void check_sequence_arrays(const Problem& problem);

// fa_kvcache_forward / fa_combine: the same two steps (shapes and pointers; then, for host memory,
// the contents of cache_seqlens, cache_batch_idx, cache_leftpad, block tables, rotary positions).
KvCacheProblem make_kvcache_problem(const fa_kvcache_params* params);
void check_kvcache_arrays(const KvCacheProblem& problem);
CombineProblem make_combine_problem(const fa_combine_params* params);

} // namespace flashattn
