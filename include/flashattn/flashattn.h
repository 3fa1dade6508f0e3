/*
 * flashattn: exact attention, softmax(Q K^T * scale) V, without the N x N matrix in memory.
 *
 * This is the stable C ABI. Everything crosses it as one plain parameter struct of pointers,
 * sizes and explicit element strides (the design of FlashAttention-2's Flash_fwd_params), so any
 * layout whose last dimension is contiguous works without copies, from any language.
 *
 * Layout. Q, K, V, O and their gradients are (batch, seqlen, heads, head_dim) views: element
 * (b, s, h, d) of a tensor t lives at t.data + b*t.batch_stride + s*t.row_stride + h*t.head_stride + d
 * (strides in elements, not bytes; head_dim is always contiguous; v, out, dout and dv have head_dim_v
 * columns, see fa_fwd_params). In the varlen entry points the
 * batch dimension is gone: sequences are packed along the row dimension, (total_tokens, heads, head_dim),
 * sequence b occupying rows [cu_seqlens[b], cu_seqlens[b+1]), and batch_stride is ignored.
 *
 * Semantics are those of the flash_attn 2.x Python package; see docs/semantics.md.
 *
 * Versioning. Initialise a struct with fa_fwd_params_init / fa_bwd_params_init before filling it:
 * they set struct_size and every option to its default, so code compiled against an older header
 * keeps working when fields are appended at the end (the library reads only struct_size bytes and
 * defaults the rest).
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
    int32_t head_dim;     /* 1..256, of q and k (v and out: head_dim_v, below) */

    fa_tensor q, k, v;    /* inputs */
    fa_tensor out;        /* output, shaped like q but with head_dim_v columns */
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
     * drops exactly the same elements. Kept elements are scaled by 1/(1-dropout_p). The pair can
     * instead come from memory the work reads when it runs (rng_state, below: CUDA graphs). */
    float dropout_p;
    uint64_t rng_seed;
    uint64_t rng_offset;

    /* Optional, tests only (O(N^2) memory): fp32 contiguous (batch, num_heads, seqlen_q, seqlen_k)
     * receives the normalised attention probabilities, negated where dropout dropped them. Varlen:
     * seqlen_q/seqlen_k are the maxima and element (b, h, i, j) is query i and key j of sequence b;
     * elements past a sequence's lengths are 0 (flash_attn's padded S_dmask). */
    float* attn_probs;

    int32_t num_splits;   /* split-KV: 0 = heuristic, 1 = off; backends may ignore it (same result) */
    fa_backend backend;
    void* stream;         /* cudaStream_t for the CUDA backend; NULL = default stream */

    /* ---- appended after 0.1.0: callers built against 0.1.0 pass its smaller struct_size and get the defaults ----
     * Optional paged K/V (forward only: fa_forward, fa_varlen_forward, fa_kvcache_forward). k and v
     * are then (num_blocks, page_size, num_heads_k, head_dim) pools: batch_stride steps from one
     * block to the next, row_stride from one row of a block to the next. Row j of sequence b (j
     * counted from the sequence's first key, plus cache_leftpad[b] in fa_kvcache_forward) lives in
     * block block_table[b * block_table_batch_stride + j / page_size], at row j % page_size.
     * Varlen: cu_seqlens_k then gives only the lengths (every sequence starts at row 0 of its
     * table) and total_k is ignored. Sequence lengths must fit: seqlen_k <= max_blocks_per_seq *
     * page_size. Entries must be in [0, num_blocks): checked at the call on the CPU; on CUDA an
     * out-of-range entry read by a kernel is a fault (see fa_check_device_faults). */
    const int32_t* block_table;       /* int32 (batch, max_blocks_per_seq); NULL = contiguous k/v */
    int64_t block_table_batch_stride; /* elements between rows of block_table, >= max_blocks_per_seq */
    int32_t max_blocks_per_seq;       /* entries per row of block_table that may be read */
    int32_t page_size;                /* rows per block: a positive multiple of 16 */
    int32_t num_blocks;               /* blocks in k and v */

    /* ---- appended after the block table fields: callers built before pass that struct_size ----
     * Optional dropout generator state, two uint64 {seed, offset}; NULL = rng_seed and rng_offset.
     * When set, the backends read the pair from it when the work runs, instead of rng_seed and
     * rng_offset: the CUDA kernels read device memory at their start (so a captured CUDA graph,
     * replayed after something rewrote these 16 bytes, drops a new set of elements), the CPU
     * backend reads host memory at the call. Same memory as q. The mask is the one the by-value
     * fields would give for the same pair, on every backend. */
    const uint64_t* rng_state;

    /* ---- appended after rng_state: callers built before pass that struct_size and get the defaults ----
     * Value head dim (DeepSeek's multi-head latent attention runs q/k at 192, v at 128): v, out (and
     * in the backward dout and dv; in fa_kvcache_forward v_new) have head_dim_v columns, q and k
     * keep head_dim. 0 = head_dim; else 1..256. The default softmax scale stays 1/sqrt(head_dim).
     * On CUDA a pair runs at the wider width with the narrower tensors staged as zero-padded copies
     * (a narrower v cache or paged pool is copied whole per call: see docs/cuda-backend.md). */
    int32_t head_dim_v;
    /* Optional learnable attention sinks (gpt-oss): fp32 (num_heads), one logit per query head, in
     * the memory of q. Each row's softmax denominator gains exp(sink[h]), which takes no value:
     * out_i = sum_j exp(s_ij - m) v_j / (exp(sink[h] - m) + sum_j exp(s_ij - m)), and softmax_lse
     * includes the sink's term. Finite values (checked at the call on the CPU; not read on the host
     * on CUDA). NULL = no sink. See docs/semantics.md. */
    const float* learnable_sink;
} fa_fwd_params;

typedef struct fa_bwd_params {
    uint32_t struct_size; /* set by fa_bwd_params_init */
    /* The forward problem exactly as it was run, with out and softmax_lse as inputs. */
    fa_fwd_params fwd;
    fa_tensor dout;       /* gradient of out (input) */
    fa_tensor dq, dk, dv; /* outputs, same shapes as q, k, v; dk/dv summed over each KV head's query heads */
                          /* (dout and dv have fwd.head_dim_v columns) */
    int32_t deterministic; /* bitwise reproducible across runs (no atomics in any reduction) */
    /* Optional scratch memory for the CUDA backend (fa_bwd_workspace_size bytes, device memory);
     * NULL = the library allocates it. Lets a framework keep all allocation in its own allocator. */
    void* workspace;
    size_t workspace_size;

    /* ---- appended with fa_fwd_params' head_dim_v and learnable_sink ----
     * Optional output, fp32 (num_heads), in the memory of q: the gradient of fwd.learnable_sink,
     * dsink[h] = -sum over the batch and the rows i of head h of exp(sink[h] - lse_i) * D_i, with
     * D_i = rowsum(dout_i * out_i). Overwritten, like dq/dk/dv. Needs fwd.learnable_sink; NULL = not
     * computed. */
    float* dsink;
} fa_bwd_params;

/*
 * Inference: attention over a KV cache, with new tokens appended first (flash_attn_with_kvcache).
 *
 * fwd describes the attention as in fa_forward, with k = k_cache and v = v_cache:
 *   q, out       (batch, seqlen_q, num_heads, head_dim)
 *   k, v         (batch_cache, seqlen_k, num_heads_k, head_dim) caches, updated in place when k_new
 *                is given; or paged pools (fwd.block_table, see fa_fwd_params)
 *   seqlen_k     capacity of one sequence's cache (contiguous: the cache's rows per batch entry;
 *                paged: at most max_blocks_per_seq * page_size)
 *   softmax_lse, softmax_scale, causal, window_left/right, softcap, alibi_slopes, num_splits,
 *   head_dim_v (v caches and v_new), learnable_sink, backend, stream: as in fa_forward.
 *   Must stay unset: cu_seqlens_q/k, seqused_k, dropout_p,
 *   attn_probs (this is a forward-only, dense-query entry point).
 * Sequence b attends to cache rows [leftpad_b, cache_seqlens[b] + seqlen_new) of cache batch
 * entry cache_batch_idx[b] (or b), after rows [cache_seqlens[b], cache_seqlens[b] + seqlen_new)
 * were overwritten with k_new / v_new (keys rotated when rotary_cos is given). Masks and ALiBi
 * count keys from leftpad_b: key length = cache_seqlens[b] + seqlen_new - leftpad_b, and the causal
 * diagonal ends at the last key (flash_attn's bottom-right alignment). Rotary positions are cache
 * rows: new key i sits at cache_seqlens[b] + i; query i at cache_seqlens[b] + i when causal or
 * local, else at cache_seqlens[b]. Exact definitions: docs/semantics.md.
 * Every pointer is in the memory of q (host or one CUDA device); nothing synchronises with the host
 * on CUDA, so contents (cache_seqlens, block indices) are checked at the call on the CPU backend
 * and by the kernels on CUDA (fa_check_device_faults).
 */
typedef struct fa_kvcache_params {
    uint32_t struct_size;        /* set by fa_kvcache_params_init */
    fa_fwd_params fwd;           /* the attention; fwd.k/fwd.v are the caches */
    int32_t batch_cache;         /* batch entries of a contiguous cache (>= 1; ignored when paged) */
    const int32_t* cache_seqlens;   /* required, int32 (batch): rows already in each sequence's cache */
    const int32_t* cache_batch_idx; /* optional, int32 (batch): cache batch entry of sequence b; NULL = b.
                                       Not with a block table (the table already maps sequences). */
    const int32_t* cache_leftpad;   /* optional, int32 (batch): first valid cache row; NULL = 0 */
    /* Optional new keys/values, (batch, seqlen_new, num_heads_k, head_dim; v_new head_dim_v), fwd.dtype: written into
     * the cache at rows cache_seqlens[b] + i before attending. Sequences must not write the same
     * cache rows (distinct cache_batch_idx; paged: distinct blocks where they append). */
    fa_tensor k_new, v_new;
    int32_t seqlen_new;          /* rows of k_new/v_new; must be 0 when they are NULL */
    /* Optional rotary embedding of k_new and q (needs k_new): cos and sin in fwd.dtype, contiguous
     * (seqlen_rotary, rotary_dim / 2); rotary_dim even, 2 <= rotary_dim <= head_dim; the first
     * rotary_dim features rotate, the rest pass through. Every position used must be < seqlen_rotary. */
    const void* rotary_cos;
    const void* rotary_sin;
    int32_t rotary_dim;
    int32_t seqlen_rotary;
    int32_t rotary_interleaved;  /* 1: pairs (2t, 2t+1) (GPT-J); 0: pairs (t, t + rotary_dim/2) (GPT-NeoX) */

    /* ---- appended after rng_state: callers built before pass that struct_size and get the defaults ----
     * Optional scratch memory for the CUDA backend: fa_kvcache_workspace_size bytes (or more) of
     * device memory on q's device, 16-byte aligned; NULL = the library allocates stream-ordered
     * memory per call (cudaMallocAsync), which costs a decode step about a microsecond of GPU time
     * and puts allocation nodes into a captured graph. With it, a call allocates nothing. What it
     * holds (split-KV's fp32 partials, the rotated q) is dead once the call's work is done: the
     * next call on the same stream may reuse it. Ignored by the CPU backend. */
    void* workspace;
    size_t workspace_size;
} fa_kvcache_params;

/* A strided fp32 (batch, heads, rows) array of logsumexps; strides in elements. */
typedef struct fa_lse_view {
    float* data;
    int64_t batch_stride;
    int64_t head_stride;
    int64_t row_stride;
} fa_lse_view;

/*
 * Merge attention computed over disjoint key sets (split-KV partial results, a cascade's shared
 * prefix and per-sequence suffix, or the shards of context-parallel attention) into the attention
 * over their union. Split s supplies, for every (b, i, h), a normalised output O_s (fp32) and its
 * natural-log lse_s. With M = max_s lse_s (over splits with lse_s > -inf):
 *     lse = M + log(sum_s exp(lse_s - M)),   out = sum_s exp(lse_s - lse) * O_s
 * A split with lse_s = -inf (it saw no key) contributes nothing and its O_s is never read, so empty
 * splits need not write their output; a row where every split is empty gives out = 0, lse = -inf.
 * out_partial element (s, b, i, h, d) lives at out_partial.data + s * out_partial_split_stride +
 * b * batch_stride + i * row_stride + h * head_stride + d; lse_partial likewise with
 * lse_partial_split_stride. Packed (varlen) rows: batch = 1, rows = total tokens.
 */
typedef struct fa_combine_params {
    uint32_t struct_size;        /* set by fa_combine_params_init */
    int32_t num_splits;          /* >= 1 */
    int32_t batch, seqlen_q, num_heads, head_dim;
    fa_tensor out_partial;       /* fp32 */
    int64_t out_partial_split_stride;
    fa_lse_view lse_partial;
    int64_t lse_partial_split_stride;
    fa_dtype dtype;              /* of out */
    fa_tensor out;               /* output (batch, seqlen_q, num_heads, head_dim) */
    fa_lse_view lse;             /* optional output (data NULL = not written) */
    fa_backend backend;
    void* stream;
} fa_combine_params;

/* Set struct_size and every option to its default (no mask, no dropout, auto backend...).
 * fa_fwd_params_init(p) / fa_bwd_params_init(p) / fa_kvcache_params_init(p) are macros passing
 * sizeof the struct as this header defines it. The plain exported functions of those names are what
 * an older binary calls: fa_fwd/bwd_params_init initialise exactly the 0.1.0 layout,
 * fa_kvcache_params_init the layout before rng_state (never writing past its end), and the library
 * accepts those struct_sizes (and the later layouts before rng_state and before head_dim_v, through
 * the _sized functions). Bindings without macros (ctypes) call the _sized functions. */
FA_API void fa_fwd_params_init_sized(fa_fwd_params* params, size_t size);
FA_API void fa_bwd_params_init_sized(fa_bwd_params* params, size_t size);
FA_API void fa_kvcache_params_init_sized(fa_kvcache_params* params, size_t size);
FA_API void fa_fwd_params_init(fa_fwd_params* params);
FA_API void fa_bwd_params_init(fa_bwd_params* params);
FA_API void fa_kvcache_params_init(fa_kvcache_params* params);
#define fa_fwd_params_init(params) fa_fwd_params_init_sized((params), sizeof(fa_fwd_params))
#define fa_bwd_params_init(params) fa_bwd_params_init_sized((params), sizeof(fa_bwd_params))
#define fa_kvcache_params_init(params) fa_kvcache_params_init_sized((params), sizeof(fa_kvcache_params))
FA_API void fa_combine_params_init(fa_combine_params* params);

/* Dense batches: cu_seqlens_q/k must be NULL. */
FA_API fa_status fa_forward(const fa_fwd_params* params);
FA_API fa_status fa_backward(const fa_bwd_params* params);

/* Packed variable-length batches: cu_seqlens_q/k must be set. */
FA_API fa_status fa_varlen_forward(const fa_fwd_params* params);
FA_API fa_status fa_varlen_backward(const fa_bwd_params* params);

/* KV-cache attention (see fa_kvcache_params); forward only. */
FA_API fa_status fa_kvcache_forward(const fa_kvcache_params* params);

/* Merge partial attention results by their logsumexp (see fa_combine_params). */
FA_API fa_status fa_combine(const fa_combine_params* params);

/* fa_forward / fa_varlen_forward with the caller's scratch memory for the CUDA backend:
 * workspace_size >= fa_forward_workspace_size bytes of device memory on q's device, 16-byte
 * aligned, or NULL with size 0 (the library then allocates stream-ordered memory per call, as the
 * plain functions do). What the CUDA forward may need scratch for: split-KV's fp32 partials
 * (num_splits != 1), zero-padded copies of layouts it cannot read in 16-byte chunks (head_dim not a
 * multiple of 8, unaligned strides) and the lse attn_probs derives from. Dead once the call's work is
 * done: the next call on the same stream may reuse it. Ignored by the CPU backend. */
FA_API fa_status fa_forward_with_workspace(const fa_fwd_params* params, void* workspace, size_t workspace_size);
FA_API fa_status fa_varlen_forward_with_workspace(const fa_fwd_params* params, void* workspace,
                                                  size_t workspace_size);
/* Bytes of device scratch fa_forward / fa_varlen_forward (varlen when cu_seqlens_q is set) need for
 * this problem: 0 for the CPU backend or when the call needs none; 0 also for invalid params (the
 * call reports why). Depends on the shapes, strides, options, the device and whether each tensor's
 * address is 16-byte aligned, not on tensor contents. */
FA_API size_t fa_forward_workspace_size(const fa_fwd_params* params);
/* Bytes of device scratch the backward needs for this problem (0 for the CPU backend). */
FA_API size_t fa_bwd_workspace_size(const fa_bwd_params* params);
/* Bytes of device scratch a KV-cache call needs (fa_kvcache_params.workspace; 0 for the CPU backend,
 * or when the call needs none: one split and no rotary). Depends on the shapes, strides, options,
 * the device and whether each tensor's address is 16-byte aligned, not on tensor contents; 0 also
 * for invalid params (the call reports why). */
FA_API size_t fa_kvcache_workspace_size(const fa_kvcache_params* params);

/*
 * Index arrays in device memory (cu_seqlens_q/k, seqused_k, cache_seqlens, cache_batch_idx,
 * cache_leftpad, block_table entries) are read by the CUDA kernels only: checking them on the host
 * would synchronise every call. A kernel clamps every value into its valid range before it addresses
 * memory, so no value makes it read or write outside the tensors or breaks the CUDA context. A value
 * outside its range is a fault: the sequence it belongs to gets NaN attention output and lse (and
 * no appended row lands where that value would put it), the other sequences are unaffected, and the device keeps the first fault
 * until this function reports it. It waits for `stream` (a cudaStream_t on `device`; NULL = the
 * legacy default stream), then returns FA_OK, or FA_ERROR_INVALID_ARGUMENT with a message naming
 * the argument, the element, the value and its valid range, and clears the record. Call it where
 * your program synchronises anyway (a decode loop: when the sampled tokens reach the host), after
 * the work to check was queued on `stream` or ordered before it. The CPU backend checks the same
 * values at the call instead (every CPU-side array is host memory). Exact rules: docs/semantics.md. */
FA_API fa_status fa_check_device_faults(int device, void* stream);

/* The message of the last failed call on this thread ("" if none). Valid until the next call. */
FA_API const char* fa_last_error(void);
FA_API const char* fa_status_name(fa_status status);
FA_API const char* fa_version_string(void);
/* 1 if this build has the CUDA backend and a usable device is present. */
FA_API int fa_cuda_available(void);
/* Threads the CPU backend uses (FLASHATTN_NUM_THREADS, else all cores); 0 restores the default. */
FA_API void fa_set_num_threads(int num_threads);
FA_API int fa_get_num_threads(void);

/* Debugging and benchmarking only: force choices the library otherwise makes itself, e.g.
 * "forward_kernel=sm80,backward_kernel=sm90,inference_kernel=tile64" (keys: forward_kernel,
 * backward_kernel, inference_kernel, cpu_isa, cpu_blocks; docs/cuda-backend.md, "Overrides").
 * Replaces the environment variable FLASHATTN_OVERRIDES's value for the process; NULL or "" clears.
 * A forced kernel runs only where it can (each rejection's reason is the planner's). */
FA_API fa_status fa_set_overrides(const char* spec);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* FLASHATTN_FLASHATTN_H */
