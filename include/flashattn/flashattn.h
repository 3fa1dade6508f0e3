/*
 * flashattn: exact attention, softmax(Q K^T * scale) V, without the N x N matrix in memory.
 *
 * This is the stable C ABI. Everything crosses it as one plain parameter struct of pointers,
 * sizes and explicit element strides (the design of FlashAttention-2's Flash_fwd_params), so any
 * layout whose last dimension is contiguous works without copies, from any language.
 *
 * Layout. Q, K, V, O and their gradients are (batch, seqlen, heads, head_dim) views: element
 * (b, s, h, d) of a tensor t lives at t.data + b*t.batch_stride + s*t.row_stride + h*t.head_stride + d
 * (strides in elements, not bytes; head_dim is always contiguous). In the varlen entry points the
 * batch dimension is gone: sequences are packed along the row dimension, (total_tokens, heads, head_dim),
 * sequence b occupying rows [cu_seqlens[b], cu_seqlens[b+1]), and batch_stride is ignored.
 *
 * Semantics are those of the flash_attn 2.x Python package; see docs/semantics.md.
 *
 * Versioning. Initialise a struct with fa_fwd_params_init / fa_bwd_params_init before filling it:
 * they set struct_size and every option to its default, so code compiled against an older header
 * keeps working when fields are appended at the end.
 */
#ifndef FLASHATTN_FLASHATTN_H
#define FLASHATTN_FLASHATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define FA_API __declspec(dllexport)
#else
#define FA_API __attribute__((visibility("default")))
#endif

#define FLASHATTN_VERSION_MAJOR 0
#define FLASHATTN_VERSION_MINOR 1
#define FLASHATTN_VERSION_PATCH 0

typedef enum fa_status {
    FA_OK = 0,
    FA_ERROR_INVALID_ARGUMENT = 1,  /* an argument is malformed; the message names it */
    FA_ERROR_UNSUPPORTED = 2,       /* well formed, but this backend/build does not do it */
    FA_ERROR_BACKEND_UNAVAILABLE = 3, /* e.g. CUDA asked for but not built or no device */
    FA_ERROR_DEVICE = 4,            /* the CUDA runtime reported an error */
    FA_ERROR_OUT_OF_MEMORY = 5,
    FA_ERROR_INTERNAL = 6
} fa_status;

typedef enum fa_dtype {
    FA_FLOAT16 = 0,
    FA_BFLOAT16 = 1,
    FA_FLOAT32 = 2 /* CPU backend only */
} fa_dtype;

typedef enum fa_backend {
    FA_BACKEND_AUTO = 0, /* CUDA if the tensors are CUDA device memory, else CPU */
    FA_BACKEND_CPU = 1,
    FA_BACKEND_CUDA = 2
} fa_backend;

/* A strided (batch, seqlen, heads, head_dim) view; strides in elements, head_dim stride is 1. */
typedef struct fa_tensor {
    void* data;
    int64_t batch_stride;
    int64_t row_stride;
    int64_t head_stride;
} fa_tensor;

typedef struct fa_fwd_params {
    uint32_t struct_size; /* set by fa_fwd_params_init */

    fa_dtype dtype;       /* of q, k, v and out */
    int32_t batch;        /* varlen: number of sequences */
    int32_t seqlen_q;     /* varlen: max_seqlen_q (an upper bound on every sequence's length) */
    int32_t seqlen_k;     /* varlen: max_seqlen_k */
    int32_t num_heads;    /* query heads */
    int32_t num_heads_k;  /* key/value heads; num_heads % num_heads_k == 0 (MQA/GQA) */
    int32_t head_dim;     /* 1..256 */

    fa_tensor q, k, v;    /* inputs */
    fa_tensor out;        /* output, same shape as q */
    /* Output, fp32, contiguous: (batch, num_heads, seqlen_q); varlen: (num_heads, total_q).
     * The natural log of the softmax denominator per query row; -inf for a row that may attend to
     * no key. Optional in the forward (NULL = not written), required by the backward. */
    float* softmax_lse;

    /* Varlen only: int32 prefix sums of length batch+1, non-decreasing, starting at 0, in the same
     * memory as the tensors; total_q/total_k are the rows of the packed q and k tensors, which
     * bound cu_seqlens_q[batch] and cu_seqlens_k[batch]. */
    const int32_t* cu_seqlens_q;
    const int32_t* cu_seqlens_k;
    int64_t total_q;
    int64_t total_k;
    /* Optional, varlen or not: int32 (batch); sequence b attends only to its first seqused_k[b] keys. */
    const int32_t* seqused_k;

    float softmax_scale;  /* 0 = 1/sqrt(head_dim) */
    int32_t causal;       /* bottom-right aligned when seqlen_q != seqlen_k */
    int32_t window_left;  /* local attention, -1 = unbounded; causal forces window_right = 0 */
    int32_t window_right;
    float softcap;        /* > 0: scores = softcap * tanh(scores / softcap); 0 = off */
    /* Optional fp32 ALiBi slopes: (num_heads) if alibi_batch_stride == 0, else (batch, num_heads)
     * with that stride between batches. Adds -slope * |i + seqlen_k - seqlen_q - j| to score (i, j). */
    const float* alibi_slopes;
    int64_t alibi_batch_stride;

    /* Dropout on the attention probabilities. Element (b, h, i, j) is kept iff the Philox4x32-10
     * stream keyed by (rng_seed, rng_offset) says so (include/flashattn/philox.h): every backend
     * drops exactly the same elements. Kept elements are scaled by 1/(1-dropout_p). */
    float dropout_p;
    uint64_t rng_seed;
    uint64_t rng_offset;

    /* Optional, tests only (O(N^2) memory): fp32 contiguous (batch, num_heads, seqlen_q, seqlen_k)
     * receives the normalised attention probabilities, negated where dropout dropped them. */
    float* attn_probs;

    int32_t num_splits;   /* split-KV: 0 = heuristic, 1 = off; backends may ignore it */
    fa_backend backend;
    void* stream;         /* cudaStream_t for the CUDA backend; NULL = default stream */
} fa_fwd_params;

typedef struct fa_bwd_params {
    uint32_t struct_size; /* set by fa_bwd_params_init */
    /* The forward problem exactly as it was run, with out and softmax_lse as inputs. */
    fa_fwd_params fwd;
    fa_tensor dout;       /* gradient of out (input) */
    fa_tensor dq, dk, dv; /* outputs, same shapes as q, k, v; dk/dv summed over each KV head's query heads */
    int32_t deterministic; /* bitwise reproducible across runs (no atomics in any reduction) */
    /* Optional scratch memory for the CUDA backend (fa_bwd_workspace_size bytes, device memory);
     * NULL = the library allocates it. Lets a framework keep all allocation in its own allocator. */
    void* workspace;
    size_t workspace_size;
} fa_bwd_params;

/* Set struct_size and every option to its default (no mask, no dropout, auto backend...). */
FA_API void fa_fwd_params_init(fa_fwd_params* params);
FA_API void fa_bwd_params_init(fa_bwd_params* params);

/* Dense batches: cu_seqlens_q/k must be NULL. */
FA_API fa_status fa_forward(const fa_fwd_params* params);
FA_API fa_status fa_backward(const fa_bwd_params* params);

/* Packed variable-length batches: cu_seqlens_q/k must be set. */
FA_API fa_status fa_varlen_forward(const fa_fwd_params* params);
FA_API fa_status fa_varlen_backward(const fa_bwd_params* params);

/* Bytes of device scratch the backward needs for this problem (0 for the CPU backend). */
FA_API size_t fa_bwd_workspace_size(const fa_bwd_params* params);

/* The message of the last failed call on this thread ("" if none). Valid until the next call. */
FA_API const char* fa_last_error(void);
FA_API const char* fa_status_name(fa_status status);
FA_API const char* fa_version_string(void);
/* 1 if this build has the CUDA backend and a usable device is present. */
FA_API int fa_cuda_available(void);
/* Threads the CPU backend uses (FLASHATTN_NUM_THREADS, else all cores); 0 restores the default. */
FA_API void fa_set_num_threads(int num_threads);
FA_API int fa_get_num_threads(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHATTN_FLASHATTN_H */
