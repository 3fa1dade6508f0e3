// Argument checking: every malformed input becomes an Error that names the argument and says what
// was expected, before any backend touches memory.
#include "error.h"
#include "problem.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <string>

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

} // namespace

Problem make_problem(const fa_fwd_params* params, bool varlen, const char* what) {
    require(params != nullptr, what, " must not be NULL");
    require(params->struct_size == sizeof(fa_fwd_params), what,
            ".struct_size does not match this library (call fa_fwd_params_init first): got ", params->struct_size,
            ", expected ", sizeof(fa_fwd_params));
    const fa_fwd_params& p = *params;
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
    const int64_t k_rows = varlen ? p.total_k : p.seqlen_k;
    const int64_t dense_batch = varlen ? 1 : p.batch;
    check_tensor("q", p.q, varlen, q_rows, p.num_heads, p.head_dim, dense_batch, false);
    check_tensor("k", p.k, varlen, k_rows, p.num_heads_k, p.head_dim, dense_batch, false);
    check_tensor("v", p.v, varlen, k_rows, p.num_heads_k, p.head_dim, dense_batch, false);
    check_tensor("out", p.out, varlen, q_rows, p.num_heads, p.head_dim, dense_batch, true);

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
    require(!(varlen && p.attn_probs), "attn_probs (return_attn_probs) is only supported by the dense entry point");

    problem.scale = p.softmax_scale != 0.0f ? p.softmax_scale : 1.0f / std::sqrt(float(p.head_dim));
    problem.scale_log2 = problem.scale * 1.44269504088896340736f;
    problem.group = p.num_heads / p.num_heads_k;
    problem.mask.window_left = p.window_left;
    problem.mask.window_right = p.causal ? 0 : p.window_right;
    return problem;
}

void check_sequence_arrays(const Problem& problem) {
    const fa_fwd_params& p = problem.p;
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
        check_cu_seqlens("cu_seqlens_k", p.cu_seqlens_k, p.batch, p.seqlen_k, "seqlen_k (max_seqlen_k)", p.total_k,
                         "total_k");
    }
    if (p.seqused_k) {
        for (int64_t b = 0; b < p.batch; ++b) {
            const int64_t k_len = problem.varlen ? int64_t(p.cu_seqlens_k[b + 1]) - p.cu_seqlens_k[b] : p.seqlen_k;
            require(p.seqused_k[b] >= 0 && p.seqused_k[b] <= k_len, "seqused_k[", b, "] must be in [0, ", k_len,
                    "], got ", p.seqused_k[b]);
        }
    }
}

BwdProblem make_bwd_problem(const fa_bwd_params* params, bool varlen) {
    require(params != nullptr, "params must not be NULL");
    require(params->struct_size == sizeof(fa_bwd_params),
            "params.struct_size does not match this library (call fa_bwd_params_init first): got ",
            params->struct_size, ", expected ", sizeof(fa_bwd_params));
    BwdProblem problem{make_problem(&params->fwd, varlen, "params.fwd"), *params};
    problem.fwd.p.attn_probs = nullptr; // a forward-only output
    const fa_fwd_params& f = params->fwd;
    const bool varlen_rows = varlen;
    const int64_t q_rows = varlen_rows ? problem.fwd.total_q : f.seqlen_q;
    const int64_t k_rows = varlen_rows ? f.total_k : f.seqlen_k;
    const int64_t dense_batch = varlen_rows ? 1 : f.batch;
    require(f.softmax_lse != nullptr || q_rows == 0, "fwd.softmax_lse must not be NULL: the backward needs the forward's logsumexp");
    check_tensor("dout", params->dout, varlen, q_rows, f.num_heads, f.head_dim, dense_batch, false);
    check_tensor("dq", params->dq, varlen, q_rows, f.num_heads, f.head_dim, dense_batch, true);
    check_tensor("dk", params->dk, varlen, k_rows, f.num_heads_k, f.head_dim, dense_batch, true);
    check_tensor("dv", params->dv, varlen, k_rows, f.num_heads_k, f.head_dim, dense_batch, true);
    return problem;
}

} // namespace flashattn
