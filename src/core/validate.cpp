// Argument checking: every malformed input becomes an Error that names the argument and says what
// was expected, before any backend touches memory.
#include "error.h"
#include "problem.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace flashattn {
namespace {

std::string field(const char* prefix, const char* name) { return std::string(prefix) + "." + name; }

// The integer a caller stored in an enum field. Reading a value outside the enumerators through the
// enum type is undefined behaviour in C++ (UBSan's -fsanitize=enum stops there), and a C or Python
// caller can store anything, so the check reads the field's bytes instead.
template <typename Enum>
int32_t stored_value(const Enum& field) {
    static_assert(sizeof(Enum) == sizeof(int32_t), "C enums are int-sized");
    int32_t raw;
    std::memcpy(&raw, &field, sizeof raw);
    return raw;
}

// An output must not overlap itself, or parallel writes race and the result silently depends on the
// schedule. The usual rule: sorted by stride, each dimension must step past everything the smaller
// dimensions cover.
bool writes_never_overlap(int64_t batch, int64_t rows, int64_t heads, int64_t head_dim, const fa_tensor& t) {
    std::array<std::pair<int64_t, int64_t>, 4> dims{
        {{t.batch_stride, batch}, {t.row_stride, rows}, {t.head_stride, heads}, {1, head_dim}}};
    std::sort(dims.begin(), dims.end());
    int64_t covered = 1; // elements spanned by the dimensions seen so far
    for (const auto& [stride, extent] : dims) {
        if (extent <= 1) continue;
        if (stride < covered) return false;
        covered += stride * (extent - 1);
    }
    return true;
}

// `batch` is 1 for varlen tensors, whose batch dimension is packed into the rows.
void check_tensor(const char* name, const fa_tensor& t, bool varlen, int64_t rows, int64_t heads,
                  int64_t head_dim, int64_t batch, bool is_output) {
    const bool has_elements = rows > 0 && heads > 0 && batch > 0;
    require(!has_elements || t.data != nullptr, field(name, "data"), " must not be NULL");
    require(t.row_stride >= 0, field(name, "row_stride"), " must be >= 0, got ", t.row_stride);
    require(t.head_stride >= 0, field(name, "head_stride"), " must be >= 0, got ", t.head_stride);
    if (!varlen) require(t.batch_stride >= 0, field(name, "batch_stride"), " must be >= 0, got ", t.batch_stride);
    if (!is_output || !has_elements) return;
    fa_tensor strides = t;
    if (varlen) strides.batch_stride = 0;
    require(writes_never_overlap(batch, rows, heads, head_dim, strides), name,
            " is an output, so its elements must not alias: strides (batch ", strides.batch_stride, ", row ",
            t.row_stride, ", head ", t.head_stride, ", dim 1) overlap for shape (", batch, ", ", rows, ", ", heads,
            ", ", head_dim, ")");
}

void check_cu_seqlens(const char* name, const int32_t* cu, int64_t batch, int64_t max_len, const char* max_name,
                      int64_t total, const char* total_name) {
    require(cu[0] == 0, name, "[0] must be 0, got ", cu[0]);
    for (int64_t b = 0; b < batch; ++b) {
        const int64_t len = int64_t(cu[b + 1]) - cu[b];
        require(len >= 0, name, " must be non-decreasing, but ", name, "[", b + 1, "]=", cu[b + 1], " < ", name,
                "[", b, "]=", cu[b]);
        require(len <= max_len, "sequence ", b, " has length ", len, " (from ", name, ") but ", max_name, " is ",
                max_len, "; ", max_name, " must bound every sequence");
    }
    require(cu[batch] <= total, name, "[batch]=", cu[batch], " exceeds ", total_name, "=", total);
}


// The caller's fa_fwd_params, read only as far as its struct_size says, the rest defaulted.
fa_fwd_params read_fwd_params(const fa_fwd_params* params, const char* what) {
    require(params != nullptr, what, " must not be NULL");
    require(known_fwd_params_size(params->struct_size), what,
            ".struct_size does not match this library (call fa_fwd_params_init first): got ", params->struct_size,
            ", expected ", sizeof(fa_fwd_params), " (or ", kFwdParamsSize_rng, " from the header before head_dim_v, ",
            kFwdParamsSize_paged, " from the one before rng_state, ", kFwdParamsSize_0_1, " from the 0.1.0 header)");
    fa_fwd_params p;
    fa_fwd_params_init(&p);
    std::memcpy(&p, params, params->struct_size);
    p.struct_size = sizeof(fa_fwd_params);
    return p;
}

// The block table fields: shapes only (the entries are checked with the other host arrays).
void check_block_table(const fa_fwd_params& p) {
    require(p.page_size >= 16 && p.page_size % 16 == 0, "page_size must be a positive multiple of 16 (with a block_table), got ",
            p.page_size);
    require(p.max_blocks_per_seq >= 1, "max_blocks_per_seq must be >= 1 (with a block_table), got ", p.max_blocks_per_seq);
    require(p.block_table_batch_stride >= p.max_blocks_per_seq, "block_table_batch_stride must be >= max_blocks_per_seq (",
            p.max_blocks_per_seq, "), got ", p.block_table_batch_stride);
    require(p.num_blocks >= 1, "num_blocks must be >= 1 (with a block_table), got ", p.num_blocks);
    require(int64_t(p.seqlen_k) <= int64_t(p.max_blocks_per_seq) * p.page_size, "seqlen_k (", p.seqlen_k,
            ") must be <= max_blocks_per_seq * page_size (", int64_t(p.max_blocks_per_seq) * p.page_size,
            "): a sequence cannot hold more rows than its block table maps");
}

KvLayout kv_layout_of(const fa_fwd_params& p) {
    KvLayout kv;
    if (p.block_table) {
        kv.block_table = p.block_table;
        kv.block_table_stride = p.block_table_batch_stride;
        kv.page_size = p.page_size;
        kv.num_blocks = p.num_blocks;
    }
    return kv;
}

// Everything make_problem checks; k_batch is how many batch entries k and v have (the sequences'
// own, a KV cache's batch_cache, or the blocks of a paged pool).
Problem make_problem_impl(const fa_fwd_params& p, bool varlen, int64_t k_batch, bool k_is_output) {
    Problem problem{};
    problem.p = p;
    problem.varlen = varlen;

    const int32_t dtype = stored_value(p.dtype), backend = stored_value(p.backend);
    require(dtype == FA_FLOAT16 || dtype == FA_BFLOAT16 || dtype == FA_FLOAT32,
            "dtype must be FA_FLOAT16, FA_BFLOAT16 or FA_FLOAT32, got ", dtype);
    require(backend == FA_BACKEND_AUTO || backend == FA_BACKEND_CPU || backend == FA_BACKEND_CUDA,
            "backend must be FA_BACKEND_AUTO, FA_BACKEND_CPU or FA_BACKEND_CUDA, got ", backend);
    require(p.batch >= 1, "batch must be >= 1, got ", p.batch);
    require(p.seqlen_q >= 0, varlen ? "seqlen_q (max_seqlen_q)" : "seqlen_q", " must be >= 0, got ", p.seqlen_q);
    require(p.seqlen_k >= 0, varlen ? "seqlen_k (max_seqlen_k)" : "seqlen_k", " must be >= 0, got ", p.seqlen_k);
    require(p.num_heads >= 1, "num_heads must be >= 1, got ", p.num_heads);
    require(p.num_heads_k >= 1, "num_heads_k must be >= 1, got ", p.num_heads_k);
    require(p.num_heads % p.num_heads_k == 0, "num_heads (", p.num_heads, ") must be a multiple of num_heads_k (",
            p.num_heads_k, ") for MQA/GQA");
    require(p.head_dim >= 1 && p.head_dim <= 256, "head_dim must be in [1, 256], got ", p.head_dim);
    // Like head_dim, no multiple is required: the CPU backend pads rows to its vectors, the CUDA
    // backend stages odd widths (which head_dim_v pairs its kernels take is the backend's check).
    require(p.head_dim_v >= 0 && p.head_dim_v <= 256,
            "head_dim_v (the head dim of v and out) must be in [1, 256], or 0 for head_dim, got ", p.head_dim_v);
    if (p.head_dim_v == 0) problem.p.head_dim_v = p.head_dim;
    const int64_t dv = problem.p.head_dim_v;

    if (varlen) {
        require(p.cu_seqlens_q != nullptr, "cu_seqlens_q must not be NULL for a varlen call");
        require(p.cu_seqlens_k != nullptr, "cu_seqlens_k must not be NULL for a varlen call");
        require(p.total_q >= 0, "total_q (rows of the packed q) must be >= 0, got ", p.total_q);
        require(p.total_k >= 0, "total_k (rows of the packed k) must be >= 0, got ", p.total_k);
        problem.total_q = p.total_q;
    } else {
        require(p.cu_seqlens_q == nullptr && p.cu_seqlens_k == nullptr,
                "cu_seqlens_q/cu_seqlens_k must be NULL for a dense call; use the varlen entry point for packed batches");
        problem.total_q = int64_t(p.batch) * p.seqlen_q;
    }

    const int64_t q_rows = varlen ? problem.total_q : p.seqlen_q;
    const int64_t dense_batch = varlen ? 1 : p.batch;
    check_tensor("q", p.q, varlen, q_rows, p.num_heads, p.head_dim, dense_batch, false);
    if (p.block_table) { // a pool of (num_blocks, page_size) rows, varlen or not
        check_block_table(p);
        check_tensor("k", p.k, false, p.page_size, p.num_heads_k, p.head_dim, p.num_blocks, k_is_output);
        check_tensor("v", p.v, false, p.page_size, p.num_heads_k, dv, p.num_blocks, k_is_output);
    } else {
        const int64_t k_rows = varlen ? p.total_k : p.seqlen_k;
        check_tensor("k", p.k, varlen, k_rows, p.num_heads_k, p.head_dim, varlen ? 1 : k_batch, k_is_output);
        check_tensor("v", p.v, varlen, k_rows, p.num_heads_k, dv, varlen ? 1 : k_batch, k_is_output);
    }
    check_tensor("out", p.out, varlen, q_rows, p.num_heads, dv, dense_batch, true);

    // A negative scale would turn the row maximum of the raw scores into the minimum of the scaled
    // ones, which every max-subtracting kernel relies on; no model uses one, so it is refused.
    require(std::isfinite(p.softmax_scale) && p.softmax_scale >= 0.0f,
            "softmax_scale must be finite and >= 0 (0 selects 1/sqrt(head_dim)), got ", p.softmax_scale);
    require(p.window_left >= -1, "window_left must be >= -1 (-1 = unbounded), got ", p.window_left);
    require(p.window_right >= -1, "window_right must be >= -1 (-1 = unbounded), got ", p.window_right);
    require(std::isfinite(p.softcap) && p.softcap >= 0.0f, "softcap must be finite and >= 0 (0 = off), got ", p.softcap);
    require(p.alibi_batch_stride == 0 || p.alibi_batch_stride >= p.num_heads,
            "alibi_batch_stride must be 0 (slopes shared by the batch) or >= num_heads (", p.num_heads, "), got ",
            p.alibi_batch_stride);
    require(std::isfinite(p.dropout_p) && p.dropout_p >= 0.0f && p.dropout_p < 1.0f,
            "dropout_p must be in [0, 1), got ", p.dropout_p);
    require(p.num_splits >= 0, "num_splits must be >= 0 (0 = heuristic, 1 = off), got ", p.num_splits);

    problem.scale = p.softmax_scale != 0.0f ? p.softmax_scale : 1.0f / std::sqrt(float(p.head_dim));
    problem.scale_log2 = problem.scale * 1.44269504088896340736f;
    problem.group = p.num_heads / p.num_heads_k;
    problem.mask.window_left = p.window_left;
    problem.mask.window_right = p.causal ? 0 : p.window_right;
    problem.kv = kv_layout_of(p);
    return problem;
}

void check_lengths(const char* name, const int32_t* values, int64_t count, int64_t lo, int64_t hi, const char* why) {
    for (int64_t b = 0; b < count; ++b)
        require(values[b] >= lo && values[b] <= hi, name, "[", b, "] must be in [", lo, ", ", hi, "]", why, ", got ",
                values[b]);
}

} // namespace

Problem make_problem(const fa_fwd_params* params, bool varlen, const char* what) {
    const fa_fwd_params p = read_fwd_params(params, what);
    return make_problem_impl(p, varlen, p.batch, false);
}

void check_sequence_arrays(const Problem& problem) {
    const fa_fwd_params& p = problem.p;
    if (p.learnable_sink)
        for (int64_t h = 0; h < p.num_heads; ++h)
            require(std::isfinite(p.learnable_sink[h]), "learnable_sink[", h, "] must be finite (a logit), got ",
                    p.learnable_sink[h]);
    if (p.alibi_slopes) {
        const int64_t batches = p.alibi_batch_stride == 0 ? 1 : p.batch;
        for (int64_t b = 0; b < batches; ++b)
            for (int64_t h = 0; h < p.num_heads; ++h) {
                const float slope = p.alibi_slopes[b * p.alibi_batch_stride + h];
                require(std::isfinite(slope), "alibi_slopes[", b * p.alibi_batch_stride + h, "] must be finite, got ",
                        slope);
            }
    }
    if (problem.varlen) {
        check_cu_seqlens("cu_seqlens_q", p.cu_seqlens_q, p.batch, p.seqlen_q, "seqlen_q (max_seqlen_q)", p.total_q,
                         "total_q");
        // Paged: the rows are found through the block table, so total_k bounds nothing.
        check_cu_seqlens("cu_seqlens_k", p.cu_seqlens_k, p.batch, p.seqlen_k, "seqlen_k (max_seqlen_k)",
                         problem.kv.paged() ? std::numeric_limits<int64_t>::max() : p.total_k, "total_k");
    }
    if (p.seqused_k) {
        for (int64_t b = 0; b < p.batch; ++b) {
            const int64_t k_len = problem.varlen ? int64_t(p.cu_seqlens_k[b + 1]) - p.cu_seqlens_k[b] : p.seqlen_k;
            require(p.seqused_k[b] >= 0 && p.seqused_k[b] <= k_len, "seqused_k[", b, "] must be in [0, ", k_len,
                    "], got ", p.seqused_k[b]);
        }
    }
    if (problem.kv.paged()) {
        // Every block a sequence reads must be in the pool (the other entries of its row are never read).
        const KvLayout& kv = problem.kv;
        for (int64_t b = 0; b < p.batch; ++b) {
            const Span s = problem.span(b);
            const int64_t rows = s.k_len > 0 ? s.k_row0 + s.k_len : 0;
            require(rows <= int64_t(p.max_blocks_per_seq) * kv.page_size, "sequence ", b, " needs ", rows,
                    " key rows but its block table row maps max_blocks_per_seq * page_size = ",
                    int64_t(p.max_blocks_per_seq) * kv.page_size);
            for (int64_t blk = 0; blk * kv.page_size < rows; ++blk) {
                const int64_t index = b * kv.block_table_stride + blk;
                require(kv.block_table[index] >= 0 && kv.block_table[index] < kv.num_blocks, "block_table[", b, "][",
                        blk, "] = ", kv.block_table[index], " must be a block index in [0, num_blocks = ",
                        kv.num_blocks, ")");
            }
        }
    }
}

namespace {

// The caller's fa_kvcache_params in today's layout: an earlier layout's missing fields take their
// defaults; the layouts with a shorter fwd member have everything after it that much earlier.
fa_kvcache_params read_kvcache_params(const fa_kvcache_params* params) {
    require(params != nullptr, "params must not be NULL");
    const size_t old_fwd = fwd_params_size_in_kvcache(params->struct_size);
    require(old_fwd != 0, "params.struct_size does not match this library (call fa_kvcache_params_init first): got ",
            params->struct_size, ", expected ", sizeof(fa_kvcache_params), " (or ", kKvCacheParamsSize_rng,
            " from the header before head_dim_v, ", kKvCacheParamsSize_before_workspace,
            " from the one before the workspace fields, ", kKvCacheParamsSize_paged, " from the one before rng_state)");
    if (params->struct_size == sizeof(fa_kvcache_params)) return *params;
    fa_kvcache_params p;
    fa_kvcache_params_init(&p);
    const char* raw = reinterpret_cast<const char*>(params);
    const size_t fwd_at = offsetof(fa_kvcache_params, fwd), tail_at = offsetof(fa_kvcache_params, batch_cache);
    const size_t tail_bytes = params->struct_size - fwd_at - old_fwd; // ends before workspace, or at the end
    std::memcpy(&p.fwd, raw + fwd_at, old_fwd);
    std::memcpy(reinterpret_cast<char*>(&p) + tail_at, raw + fwd_at + old_fwd, tail_bytes);
    p.fwd.struct_size = sizeof(fa_fwd_params); // the fields after old_fwd keep the init's defaults
    p.struct_size = sizeof(fa_kvcache_params);
    return p;
}

} // namespace

KvCacheProblem make_kvcache_problem(const fa_kvcache_params* params) {
    const fa_kvcache_params kp = read_kvcache_params(params);
    const fa_fwd_params f = read_fwd_params(&kp.fwd, "params.fwd");
    require(f.cu_seqlens_q == nullptr && f.cu_seqlens_k == nullptr,
            "fwd.cu_seqlens_q/cu_seqlens_k must be NULL for fa_kvcache_forward (q is dense; cache_seqlens gives the key lengths)");
    require(f.seqused_k == nullptr, "fwd.seqused_k must be NULL for fa_kvcache_forward (cache_seqlens gives the key lengths)");
    require(f.dropout_p == 0.0f, "fwd.dropout_p must be 0 for fa_kvcache_forward (an inference entry point), got ", f.dropout_p);
    require(f.attn_probs == nullptr, "fwd.attn_probs must be NULL for fa_kvcache_forward");
    require(kp.cache_seqlens != nullptr, "cache_seqlens must not be NULL (int32, one entry per sequence)");
    require(kp.workspace != nullptr || kp.workspace_size == 0, "workspace_size is ", kp.workspace_size,
            " but workspace is NULL (set both, or neither)");
    const bool paged = f.block_table != nullptr;
    if (!paged) require(kp.batch_cache >= 1, "batch_cache must be >= 1 (batch entries of k_cache/v_cache), got ", kp.batch_cache);
    require(!(paged && kp.cache_batch_idx), "cache_batch_idx must be NULL with a block_table (the table maps sequences to blocks)");
    if (!paged && !kp.cache_batch_idx)
        require(kp.batch_cache >= f.batch, "batch_cache (", kp.batch_cache, ") must be >= batch (", f.batch,
                ") without cache_batch_idx: sequence b uses cache entry b");

    const bool appends = kp.k_new.data != nullptr || kp.v_new.data != nullptr;
    KvCacheProblem problem{make_problem_impl(f, false, kp.batch_cache, appends), kp};
    problem.p.fwd = problem.attention.p;
    require(kp.seqlen_new >= 0, "seqlen_new must be >= 0, got ", kp.seqlen_new);
    if (appends) {
        require(kp.k_new.data != nullptr && kp.v_new.data != nullptr, "k_new.data and v_new.data must both be set (or both NULL)");
        require(kp.seqlen_new <= f.seqlen_k, "seqlen_new (", kp.seqlen_new, ") must be <= seqlen_k (", f.seqlen_k,
                "), the capacity of a sequence's cache");
        check_tensor("k_new", kp.k_new, false, kp.seqlen_new, f.num_heads_k, f.head_dim, f.batch, false);
        check_tensor("v_new", kp.v_new, false, kp.seqlen_new, f.num_heads_k, problem.attention.head_dim_v(), f.batch,
                     false);
    } else {
        require(kp.seqlen_new == 0, "seqlen_new must be 0 when k_new/v_new are NULL, got ", kp.seqlen_new);
    }
    const bool rotary = kp.rotary_cos != nullptr || kp.rotary_sin != nullptr;
    if (rotary) {
        require(kp.rotary_cos != nullptr && kp.rotary_sin != nullptr, "rotary_cos and rotary_sin must both be set (or both NULL)");
        require(appends, "rotary_cos/rotary_sin need k_new/v_new: rotary embedding applies to appended keys and to q");
        require(kp.rotary_dim >= 2 && kp.rotary_dim % 2 == 0 && kp.rotary_dim <= f.head_dim,
                "rotary_dim must be even and in [2, head_dim = ", f.head_dim, "], got ", kp.rotary_dim);
        require(kp.seqlen_rotary >= 1, "seqlen_rotary (rows of rotary_cos/rotary_sin) must be >= 1, got ", kp.seqlen_rotary);
    }

    KvLayout& kv = problem.attention.kv;
    kv.cache_seqlens = kp.cache_seqlens;
    kv.seqlen_new = appends ? kp.seqlen_new : 0;
    kv.cache_batch_idx = kp.cache_batch_idx;
    kv.cache_leftpad = kp.cache_leftpad;
    kv.cache_entries = paged ? 0 : kp.batch_cache;
    return problem;
}

void check_kvcache_arrays(const KvCacheProblem& problem) {
    const fa_kvcache_params& kp = problem.p;
    const fa_fwd_params& f = kp.fwd;
    const int64_t batch = f.batch, appended = problem.attention.kv.seqlen_new;
    check_lengths("cache_seqlens", kp.cache_seqlens, batch, 0, f.seqlen_k - appended,
                  appended ? " (seqlen_k - seqlen_new: the appended rows must fit in the cache)" : " (seqlen_k)");
    if (kp.cache_leftpad)
        for (int64_t b = 0; b < batch; ++b)
            require(kp.cache_leftpad[b] >= 0 && kp.cache_leftpad[b] <= kp.cache_seqlens[b], "cache_leftpad[", b,
                    "] must be in [0, cache_seqlens[", b, "] = ", kp.cache_seqlens[b], "], got ", kp.cache_leftpad[b]);
    if (kp.cache_batch_idx) {
        check_lengths("cache_batch_idx", kp.cache_batch_idx, batch, 0, kp.batch_cache - 1, " (batch_cache - 1)");
        if (problem.appends()) // two sequences appending to one cache entry would race
            for (int64_t b = 0; b < batch; ++b)
                for (int64_t c = 0; c < b; ++c)
                    require(kp.cache_batch_idx[b] != kp.cache_batch_idx[c], "cache_batch_idx[", c, "] and cache_batch_idx[",
                            b, "] are both ", kp.cache_batch_idx[b],
                            ": with k_new/v_new every sequence must append to its own cache entry");
    }
    if (problem.rotary())
        for (int64_t b = 0; b < batch; ++b) {
            const int64_t last = std::max(problem.new_row(b, kp.seqlen_new - 1),
                                          problem.query_position(b, std::max<int64_t>(f.seqlen_q - 1, 0)));
            require(last < kp.seqlen_rotary, "sequence ", b, " needs rotary position ", last,
                    " but rotary_cos/rotary_sin have seqlen_rotary = ", kp.seqlen_rotary, " rows");
        }
    check_sequence_arrays(problem.attention);
}

CombineProblem make_combine_problem(const fa_combine_params* params) {
    require(params != nullptr, "params must not be NULL");
    require(params->struct_size == sizeof(fa_combine_params),
            "params.struct_size does not match this library (call fa_combine_params_init first): got ",
            params->struct_size, ", expected ", sizeof(fa_combine_params));
    const fa_combine_params& p = *params;
    const int32_t dtype = stored_value(p.dtype), backend = stored_value(p.backend);
    require(dtype == FA_FLOAT16 || dtype == FA_BFLOAT16 || dtype == FA_FLOAT32,
            "dtype (of out) must be FA_FLOAT16, FA_BFLOAT16 or FA_FLOAT32, got ", dtype);
    require(backend == FA_BACKEND_AUTO || backend == FA_BACKEND_CPU || backend == FA_BACKEND_CUDA,
            "backend must be FA_BACKEND_AUTO, FA_BACKEND_CPU or FA_BACKEND_CUDA, got ", backend);
    require(p.num_splits >= 1, "num_splits must be >= 1, got ", p.num_splits);
    require(p.batch >= 1, "batch must be >= 1, got ", p.batch);
    require(p.seqlen_q >= 0, "seqlen_q must be >= 0, got ", p.seqlen_q);
    require(p.num_heads >= 1, "num_heads must be >= 1, got ", p.num_heads);
    require(p.head_dim >= 1, "head_dim must be >= 1, got ", p.head_dim);
    check_tensor("out_partial", p.out_partial, false, p.seqlen_q, p.num_heads, p.head_dim, p.batch, false);
    check_tensor("out", p.out, false, p.seqlen_q, p.num_heads, p.head_dim, p.batch, true);
    const bool has_rows = p.seqlen_q > 0;
    require(!has_rows || p.lse_partial.data != nullptr, "lse_partial.data must not be NULL");
    for (const auto& [name, stride] : {std::pair{"out_partial_split_stride", p.out_partial_split_stride},
                                       std::pair{"lse_partial_split_stride", p.lse_partial_split_stride},
                                       std::pair{"lse_partial.batch_stride", p.lse_partial.batch_stride},
                                       std::pair{"lse_partial.head_stride", p.lse_partial.head_stride},
                                       std::pair{"lse_partial.row_stride", p.lse_partial.row_stride},
                                       std::pair{"lse.batch_stride", p.lse.batch_stride},
                                       std::pair{"lse.head_stride", p.lse.head_stride},
                                       std::pair{"lse.row_stride", p.lse.row_stride}})
        require(stride >= 0, name, " must be >= 0, got ", stride);
    if (p.lse.data && has_rows) {
        fa_tensor as_tensor{p.lse.data, p.lse.batch_stride, p.lse.row_stride, p.lse.head_stride};
        require(writes_never_overlap(p.batch, p.seqlen_q, p.num_heads, 1, as_tensor),
                "lse is an output, so its elements must not alias: strides (batch ", p.lse.batch_stride, ", head ",
                p.lse.head_stride, ", row ", p.lse.row_stride, ") overlap");
    }
    return CombineProblem{p};
}

namespace {

constexpr size_t kBwdTailOffset = offsetof(fa_bwd_params, dout);

fa_bwd_params read_bwd_params(const fa_bwd_params* params) {
    require(params != nullptr, "params must not be NULL");
    const size_t old_fwd = fwd_params_size_in_bwd(params->struct_size);
    require(old_fwd != 0, "params.struct_size does not match this library (call fa_bwd_params_init first): got ",
            params->struct_size, ", expected ", sizeof(fa_bwd_params), " (or ", kBwdParamsSize_rng,
            " from the header before head_dim_v, ", kBwdParamsSize_paged, " from the one before rng_state, ",
            kBwdParamsSize_0_1, " from the 0.1.0 header)");
    if (params->struct_size == sizeof(fa_bwd_params)) return *params;
    // An earlier layout: its fwd member ends after old_fwd bytes and the tail (without dsink)
    // follows right there.
    fa_bwd_params p;
    fa_bwd_params_init(&p);
    const char* raw = reinterpret_cast<const char*>(params);
    const size_t fwd_at = offsetof(fa_bwd_params, fwd);
    std::memcpy(&p.fwd, raw + fwd_at, old_fwd);
    std::memcpy(reinterpret_cast<char*>(&p) + kBwdTailOffset, raw + fwd_at + old_fwd, kBwdTailSize_before_dsink);
    p.fwd.struct_size = sizeof(fa_fwd_params); // the fields after old_fwd keep fa_bwd_params_init's defaults
    return p;
}

} // namespace

BwdProblem make_bwd_problem(const fa_bwd_params* raw_params, bool varlen) {
    const fa_bwd_params bwd = read_bwd_params(raw_params);
    const fa_bwd_params* params = &bwd;
    BwdProblem problem{make_problem(&params->fwd, varlen, "params.fwd"), *params};
    problem.fwd.p.attn_probs = nullptr; // a forward-only output
    const fa_fwd_params& f = params->fwd;
    require(f.block_table == nullptr, "fwd.block_table must be NULL: paged K/V is a forward-only (inference) feature");
    const bool varlen_rows = varlen;
    const int64_t q_rows = varlen_rows ? problem.fwd.total_q : f.seqlen_q;
    const int64_t k_rows = varlen_rows ? f.total_k : f.seqlen_k;
    const int64_t dense_batch = varlen_rows ? 1 : f.batch;
    require(f.softmax_lse != nullptr || q_rows == 0, "fwd.softmax_lse must not be NULL: the backward needs the forward's logsumexp");
    const int64_t dv = problem.fwd.head_dim_v();
    check_tensor("dout", params->dout, varlen, q_rows, f.num_heads, dv, dense_batch, false);
    check_tensor("dq", params->dq, varlen, q_rows, f.num_heads, f.head_dim, dense_batch, true);
    check_tensor("dk", params->dk, varlen, k_rows, f.num_heads_k, f.head_dim, dense_batch, true);
    check_tensor("dv", params->dv, varlen, k_rows, f.num_heads_k, dv, dense_batch, true);
    require(params->dsink == nullptr || f.learnable_sink != nullptr,
            "dsink (the gradient of learnable_sink) is set but fwd.learnable_sink is NULL");
    problem.p.fwd = problem.fwd.p;
    return problem;
}

} // namespace flashattn
