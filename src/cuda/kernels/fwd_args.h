// What one forward launch needs, by value: the kernel's only parameter.
//
// Built on the host from a validated Problem (backend.cu). Everything here is already resolved:
// the scale, the window (causal folded in), the dropout threshold. Device code reads nothing else,
// so the meaning of each feature still comes from core/problem.h and include/flashattn/philox.h.
#pragma once

#include "device/device_faults.h"

#include "core/problem.h"

#include <flashattn/flashattn.h>

#include <cstdint>

namespace flashattn::cuda {

// Dropout's Philox seed and offset (include/flashattn/philox.h's DropoutRow), as a kernel uses them.
struct DropoutKey {
    uint64_t seed, offset;
};

struct FwdArgs {
    // Tensors (element strides; head_dim contiguous). In varlen calls batch_stride is unused.
    fa_tensor q, k, v, out;
    float* lse;                  // optional: (batch, heads, seqlen_q) or varlen (heads, total_q)

    int32_t batch;
    int32_t num_heads;
    int32_t heads_per_kv_head;   // GQA/MQA group size: KV head = query head / this
    int32_t head_dim;            // real d (a multiple of 8: 16-byte chunks); the kernel's tile may be wider
                                 // (v and out too, except in the Hopper value-dim instances: head_dim_v)
    int32_t seqlen_q, seqlen_k;  // varlen: the maxima
    int32_t num_m_blocks;        // query blocks per (sequence, head); set by the launcher
    int32_t section_heads;       // tile order, set by the launcher (kernels/tile_order.cuh); 0 = plain
    // The Hopper kernel's looping form: the counter its CTAs claim tiles from (zeroed before the
    // launch), or null: each CTA strides over the tiles by gridDim.x.
    unsigned* tile_counter;

    // Varlen (device memory, never validated on the host: the kernels clamp what they read and record
    // a value out of range in `fault`, device_faults.h).
    const int32_t* cu_seqlens_q;
    const int32_t* cu_seqlens_k;
    const int32_t* seqused_k;
    int64_t total_q, total_k;    // rows of the packed q / k (bounds for the clamps)
    DeviceFault* fault;          // the device's fault record

    // Scores.
    float scale;                 // softmax scale
    float scale_log2;            // scale * log2(e)
    float softcap;               // 0 = off
    MaskSpec mask;               // causal = window (left, 0); -1 = unbounded
    const float* alibi_slopes;   // optional, device memory
    int64_t alibi_batch_stride;
    // Learnable sinks: fp32 (num_heads), device memory; null = none. Every row's online softmax
    // starts from its head's sink (score_policies.cuh, start_rows_at_sinks).
    const float* learnable_sink;
    // Scores go through scale -> softcap -> ALiBi before the softmax (only the "extras" kernel does
    // this); otherwise the scale is folded into exp2 and raw Q.K^T feeds the softmax.
    bool transform_scores;

    // Dropout (Philox, shared with every backend).
    bool dropout;
    uint32_t keep_threshold;
    float keep_rescale;          // 1 / (1 - p)
    uint64_t rng_seed, rng_offset;
    const uint64_t* rng_state;   // optional, device memory: {seed, offset} to use instead of the two above

    // The key a kernel drops with: rng_state's pair when given, read by each kernel at its start (so a
    // replayed CUDA graph sees what was written there after capture), else the launch's values.
    // Device code only; only the kernels with dropout code call it (the plain ones never read rng_state).
    FA_HD DropoutKey dropout_key() const {
        return rng_state ? DropoutKey{rng_state[0], rng_state[1]} : DropoutKey{rng_seed, rng_offset};
    }

    // Read only by the inference variant of the SM80 kernel (fwd_kernel<..., kInference = true>,
    // set up by the host from the plan); zero everywhere else. Device arrays, never validated on the host:
    // the kernel clamps what it reads and records faults, as for cu_seqlens.
    const int32_t* block_table;  // paged K/V: (batch, block_table_stride); k/v are (blocks, page_size) pools
    int64_t block_table_stride;
    int32_t page_size;
    int32_t num_blocks;          // blocks in the k/v pools: table entries must lie in [0, num_blocks)
    const int32_t* cache_seqlens; // KV cache: rows before appending (then keys [leftpad, c + seqlen_new))
    const int32_t* cache_batch_idx;
    const int32_t* cache_leftpad;
    int32_t seqlen_new;
    int32_t cache_entries;       // batch entries of a contiguous cache (bound for cache_batch_idx)
    int32_t num_splits;          // split-KV: > 1 writes fp32 partial O and lse per split to the accumulators
    float* out_accum;            // (split, batch, seqlen_q, heads, head_dim) fp32
    float* lse_accum;            // (split, batch, heads, seqlen_q) fp32
    bool pack_gqa;               // seqlen_q == 1: tile rows are the query heads of one KV head
    bool prefetch_pages;         // paged split-keys decode: prefetch each warp's first blocks (the planner)

    // Real d of v and out (a multiple of 8). Read only by the Hopper forward's value-dim instances (V
    // narrower than Q, tiles::forward_sm90_value_dim); every other kernel reads v and out head_dim
    // wide. Last, in the struct's tail padding, so that no field the other kernels read moves: their
    // constant-bank loads, and with them ptxas's register allocation, follow the offsets (placed
    // after head_dim it moved the d128 extras kernel's spills from 302 to 306 B).
    int32_t head_dim_v;
};

} // namespace flashattn::cuda
