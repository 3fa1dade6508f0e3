// The data movement of fa_kvcache_forward before the attention: new keys and values written into the
// cache at rows cache_seqlens[b] + i (keys rotated), and q rotated into a packed copy. One warp per
// row of head_dim elements; rotary pairs and pass-through columns are spread over the lanes.
//
// The rotation is core/problem.h's rotate_features, operation for operation: fp32, the products
// x2 * sin and x2 * cos rounded on their own (__fmul_rn: never fused), then one fused multiply-add
// each, then one rounding to the dtype. Keys stored in the cache are therefore bit-identical to the
// CPU backend's and the reference's. Columns that do not rotate are copied bit for bit.
#pragma once

#include "device/device_faults.h"
#include "device/paged_rows.cuh"

#include <flashattn/flashattn.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace flashattn::cuda::kernels {

struct RotaryTable {
    const void* cos; // (seqlen_rotary, rotary_dim / 2) in the dtype; nullptr = no rotation
    const void* sin;
    int32_t rotary_dim;
    int32_t seqlen_rotary;
    bool interleaved; // pairs (2t, 2t+1), else (t, t + rotary_dim / 2)
};

// What both kernels read of the cache: where sequence b's rows are and how many it had. The arrays
// are device memory the host never read: every value is clamped into its range, and one out of range
// is a fault (device_faults.h) that sets `faulted`, for which the append writes nothing.
struct CacheRows {
    const int32_t* cache_seqlens;
    const int32_t* cache_batch_idx;
    int32_t cache_entries;
    int32_t seqlen_k;   // capacity of one sequence's cache
    int32_t seqlen_new;
    const int32_t* block_table;
    int64_t block_table_stride;
    int32_t page_size;
    int32_t num_blocks;
    DeviceFault* fault;

    // Rows before appending: the appended rows must fit in the capacity.
    __device__ __forceinline__ int cached(int b, bool& faulted) const {
        return int(checked_index(fault, faulted, FaultArg::cache_seqlens, b, 0, cache_seqlens[b], 0,
                                 seqlen_k - seqlen_new));
    }
    // Element offset of (cache row `row` of sequence b, KV head h) in t.
    __device__ __forceinline__ int64_t offset(const fa_tensor& t, int b, int64_t row, int h, bool& faulted) const {
        if (block_table) {
            PageTable pages{block_table + int64_t(b) * block_table_stride, uint32_t(page_size), num_blocks};
            const PageSlot slot = pages.slot(uint32_t(row));
            pages.report(fault, b);
            faulted |= pages.faulted;
            return int64_t(slot.block) * t.batch_stride + int64_t(slot.row) * t.row_stride + int64_t(h) * t.head_stride;
        }
        const int64_t entry = cache_batch_idx ? checked_index(fault, faulted, FaultArg::cache_batch_idx, b, 0,
                                                              cache_batch_idx[b], 0, cache_entries - 1)
                                              : b;
        return entry * t.batch_stride + row * t.row_stride + int64_t(h) * t.head_stride;
    }
};

struct AppendArgs {
    int32_t batch, heads_k, head_dim, head_dim_v;
    fa_tensor k_new, v_new; // (batch, seqlen_new, heads_k, head_dim), v_new: head_dim_v columns
    fa_tensor k_cache, v_cache;
    CacheRows cache;
    RotaryTable rotary; // keys only
};

struct RotateQueryArgs {
    int32_t batch, seqlen_q, heads, head_dim;
    fa_tensor q;
    void* q_rotated; // contiguous (batch, seqlen_q, heads, head_dim)
    CacheRows cache;
    bool position_per_row; // causal or local: query i sits at cache_seqlens + i, else at cache_seqlens
    RotaryTable rotary;
};

template <typename T>
__device__ __forceinline__ float to_float(T x);
template <>
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
template <>
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ __half from_float(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }

// dst = src (head_dim elements), the first rotary_dim features turned to `position`.
template <typename T>
__device__ __forceinline__ void copy_row_rotated(const T* src, T* dst, int head_dim, const RotaryTable& rotary,
                                                 int64_t position, int lane) {
    const int rotary_dim = rotary.cos ? rotary.rotary_dim : 0;
    const int half = rotary_dim / 2;
    if (rotary_dim) {
        position = min(max(position, int64_t(0)), int64_t(rotary.seqlen_rotary) - 1); // clamped: never read outside
        const T* cos_row = static_cast<const T*>(rotary.cos) + position * half;
        const T* sin_row = static_cast<const T*>(rotary.sin) + position * half;
        for (int t = lane; t < half; t += 32) {
            const int a = rotary.interleaved ? 2 * t : t;
            const int b = rotary.interleaved ? 2 * t + 1 : t + half;
            const float x1 = to_float(src[a]), x2 = to_float(src[b]);
            const float c = to_float(cos_row[t]), s = to_float(sin_row[t]);
            dst[a] = from_float<T>(__fmaf_rn(x1, c, -__fmul_rn(x2, s)));
            dst[b] = from_float<T>(__fmaf_rn(x1, s, __fmul_rn(x2, c)));
        }
    }
    for (int col = rotary_dim + lane; col < head_dim; col += 32) dst[col] = src[col];
}

constexpr int kRowsPerCta = 4; // warps

// Warp per (sequence b, new row i, KV head h): k_new -> k_cache (rotated), v_new -> v_cache.
template <typename T>
__global__ void __launch_bounds__(32 * kRowsPerCta) append_kv_kernel(const __grid_constant__ AppendArgs args) {
    const int lane = threadIdx.x % 32;
    const int64_t item = int64_t(blockIdx.x) * kRowsPerCta + threadIdx.x / 32;
    const int seqlen_new = args.cache.seqlen_new;
    if (item >= int64_t(args.batch) * seqlen_new * args.heads_k) return;
    const int h = int(item % args.heads_k);
    const int i = int((item / args.heads_k) % seqlen_new);
    const int b = int(item / (int64_t(args.heads_k) * seqlen_new));
    bool faulted = false;
    const int64_t row = args.cache.cached(b, faulted) + i; // also the key's rotary position
    T* const k_to = static_cast<T*>(args.k_cache.data) + args.cache.offset(args.k_cache, b, row, h, faulted);
    T* const v_to = static_cast<T*>(args.v_cache.data) + args.cache.offset(args.v_cache, b, row, h, faulted);
    if (faulted) return; // an index of the sequence out of range: its cache is left as it was
    const auto from = [&](const fa_tensor& t) {
        return static_cast<const T*>(t.data) + int64_t(b) * t.batch_stride + int64_t(i) * t.row_stride +
               int64_t(h) * t.head_stride;
    };
    copy_row_rotated(from(args.k_new), k_to, args.head_dim, args.rotary, row, lane);
    copy_row_rotated(from(args.v_new), v_to, args.head_dim_v, RotaryTable{}, 0, lane);
}

// Warp per (sequence b, query row i, head h): q -> q_rotated.
template <typename T>
__global__ void __launch_bounds__(32 * kRowsPerCta) rotate_query_kernel(const __grid_constant__ RotateQueryArgs args) {
    const int lane = threadIdx.x % 32;
    const int64_t item = int64_t(blockIdx.x) * kRowsPerCta + threadIdx.x / 32;
    if (item >= int64_t(args.batch) * args.seqlen_q * args.heads) return;
    const int h = int(item % args.heads);
    const int i = int((item / args.heads) % args.seqlen_q);
    const int b = int(item / (int64_t(args.heads) * args.seqlen_q));
    bool faulted = false; // (the attention reports it and writes NaN for the sequence)
    const int64_t position = args.cache.cached(b, faulted) + (args.position_per_row ? i : 0);
    const T* src = static_cast<const T*>(args.q.data) + int64_t(b) * args.q.batch_stride + int64_t(i) * args.q.row_stride +
                   int64_t(h) * args.q.head_stride;
    T* dst = static_cast<T*>(args.q_rotated) + item * args.head_dim; // item = (b, i, h) in row-major order
    copy_row_rotated(src, dst, args.head_dim, args.rotary, position, lane);
}

} // namespace flashattn::cuda::kernels
