// fa_combine on the device (docs/semantics.md, "Combining partial results"), also the last step of
// split-KV. Two kernels, one CTA of kWarps warps per output row (batch, row, head):
//   split_kv_combine_kernel, for split-KV's own buffer (every split's partials written): all of the
//     row's loads at once, weights from warp 0 through shared memory, straight-line code;
//   combine_kernel, for everything else and the public fa_combine, in two rounds of loads:
//   1. every warp reads the row's split lse values (lane j: splits j, j + 32, ...) and reduces
//      them to the row's lse with an online max / sum (one pass over them);
//   2. the warps share the splits (warp w: splits w, w + kWarps, ...), each lane kVec columns; a
//      warp issues the partial loads of up to kSplitsPerChunk / kWarps splits before it adds any,
//      so a lane's loads do not wait for each other.
// In both the kWarps column sums meet in shared memory and are added in warp order (a fixed order:
// the result does not depend on timing). A combine reads a few hundred KB that the forward has just
// written, so what it costs is the chain of dependent loads and the instructions between them:
// combine_kernel's one-round form (since removed) issued ~900 instructions a warp at 0.16 a cycle,
// 3.2-3.5 us at batch 1 (Nsight Compute, docs/perf-log.md); split_kv_combine_kernel ~470, and batch-1
// decode is 1.3 us faster a call. The first kernel (one warp per row and 32 columns, the lse walked three times,
// splits 16 at a time) took 3.7-7.1 us against cuDNN's 1.9-3.0 us.
// combine_kernel never reads a split whose lse is -inf (its output may be uninitialised); a row with
// no non-empty split gets out = 0 and lse = -inf; a row with a NaN lse gets NaN out and lse.
//
// After the decode kernel it is launched as a programmatic dependent on sm_90 (dependent_launch.h),
// so it waits for the partials first.
#include "kernels/aux/combine.h"

#include "host/cuda_check.h"
#include "device/dependent_launch.h"
#include "core/lse_merge.h"

#include "core/error.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cmath>

namespace flashattn::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kSplitsPerChunk = 64; // splits whose lse a warp holds at once (two per lane)

// The merge by logsumexp (core/lse_merge.h) of the 32 lanes' running sums: every lane ends with the
// warp's.
__device__ __forceinline__ void warp_reduce(LseSum& s) {
    for (int offset = 16; offset > 0; offset /= 2) {
        const float max2 = __shfl_xor_sync(0xffffffffu, s.max, offset);
        const float sum2 = __shfl_xor_sync(0xffffffffu, s.sum, offset);
        const bool nan2 = __shfl_xor_sync(0xffffffffu, int(s.nan), offset) != 0;
        s.add(max2, sum2, nan2);
    }
}

// The merged lse2 of the warp's 64 values (lane j: lo, hi) in merged_lse2's two-pass form
// (core/lse_merge.h): the max over the warp, then one sum of independent exponentials. It is the
// critical path of split-KV's combine; a running LseSum across the shuffles would wait on an
// exponential at every step. NaN when any value is NaN, -inf when all are -inf.
__device__ __forceinline__ float warp_merged_lse2(float lo, float hi) {
    const bool nan = __any_sync(0xffffffffu, lo != lo || hi != hi);
    float max = fmaxf(lo, hi);
    for (int offset = 16; offset > 0; offset /= 2) max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, offset));
    if (nan) return NAN;
    if (!(max > -INFINITY)) return -INFINITY;
    float sum = lse_exp2(lo - max) + lse_exp2(hi - max); // 2^-inf = 0
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    return max + log2f(sum);
}

// This CTA's output row: (batch, row, head) of blockIdx.x. 32-bit arithmetic (launch_combine: at
// most INT_MAX rows): 64-bit divisions were calls, three of them in front of the first load.
struct OutputRow {
    uint32_t b, i, h;
};
__device__ __forceinline__ OutputRow output_row(const CombineArgs& args) {
    const uint32_t row_item = blockIdx.x, heads = uint32_t(args.heads), rows = uint32_t(args.rows);
    const uint32_t h = row_item % heads, bi = row_item / heads;
    const uint32_t i = bi % rows, b = bi / rows;
    return {b, i, h};
}

// out[at] = value in the output's dtype.
__device__ __forceinline__ void store_out(const CombineArgs& args, int64_t at, float value) {
    switch (args.out_dtype) {
        case FA_FLOAT16: static_cast<__half*>(args.out)[at] = __float2half_rn(value); break;
        case FA_BFLOAT16: static_cast<__nv_bfloat16*>(args.out)[at] = __float2bfloat16_rn(value); break;
        default: static_cast<float*>(args.out)[at] = value; break;
    }
}

template <int kVec> struct Floats;
template <> struct Floats<1> {
    float v[1];
    __device__ __forceinline__ static Floats load(const float* p) { return {{*p}}; }
};
template <> struct Floats<4> {
    float v[4];
    __device__ __forceinline__ static Floats load(const float* p) {
        const float4 x = *reinterpret_cast<const float4*>(p);
        return {{x.x, x.y, x.z, x.w}};
    }
};

// kVec: columns per lane and load, 4 (float4) when the partials' pointer, strides and head_dim
// allow 16-byte loads, else 1.
template <int kVec>
__global__ void __launch_bounds__(kThreads) combine_kernel(const __grid_constant__ CombineArgs args) {
    constexpr int kSplitsPerWarp = kSplitsPerChunk / kWarps; // loads of a lane in flight
    constexpr int kColumns = 32 * kVec;                      // columns of one pass of a warp
    __shared__ float column_sums[kWarps][kColumns];
    wait_for_prerequisite_grid(); // the partials: written by the kernel before this one
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const auto [b, i, h] = output_row(args);
    const int num_splits = args.num_splits;
    // Lane j keeps the lse of splits j and j + 32 (the first chunk's), in log2 units; loaded first,
    // the row's critical path.
    const float* lse_row = args.lse_partial + b * args.lse_batch_stride + h * args.lse_head_stride + i * args.lse_row_stride;
    auto split_lse = [&](int s) {
        return s < num_splits ? lse_row[int64_t(s) * args.lse_split_stride] * kLog2e : -INFINITY;
    };
    const float first_lo = split_lse(lane), first_hi = split_lse(lane + 32);
    const float* partial_row = args.partial + b * args.partial_batch_stride + i * args.partial_row_stride +
                               h * args.partial_head_stride;

    // Round 1: the row's lse.
    LseSum total;
    total.add(first_lo);
    total.add(first_hi);
    for (int s = lane + kSplitsPerChunk; s < num_splits; s += 32) total.add(split_lse(s));
    warp_reduce(total);
    const bool nan_split = total.nan; // a NaN lse makes the row NaN (out and lse)
    const float lse = total.lse2();   // log2 units

    // Round 2 (per chunk of splits and pass of columns): this warp's splits of the chunk, weighted.
    const int64_t out_at = b * args.out_batch_stride + i * args.out_row_stride + h * args.out_head_stride;
    for (int c0 = 0; c0 < args.head_dim; c0 += kColumns) {
        const int c = c0 + lane * kVec; // this lane's first column (kVec columns, all or none valid)
        float acc[kVec] = {};
        if (lse > -INFINITY) {
            for (int s0 = 0; s0 < num_splits; s0 += kSplitsPerChunk) {
                // Lane j: the weights of splits s0 + j and s0 + 32 + j; -1 for an empty split.
                const float lo = s0 == 0 ? first_lo : split_lse(s0 + lane);
                const float hi = s0 == 0 ? first_hi : split_lse(s0 + 32 + lane);
                const float weight_lo = lo > -INFINITY ? LseSum::weight(lo, lse) : -1.0f;
                const float weight_hi = hi > -INFINITY ? LseSum::weight(hi, lse) : -1.0f;
                float w[kSplitsPerWarp];
                Floats<kVec> x[kSplitsPerWarp];
#pragma unroll
                for (int u = 0; u < kSplitsPerWarp; ++u) {
                    const int k = warp + u * kWarps; // split s0 + k of the chunk
                    const float from_lo = __shfl_sync(0xffffffffu, weight_lo, k % 32);
                    const float from_hi = __shfl_sync(0xffffffffu, weight_hi, k % 32);
                    w[u] = k < 32 ? from_lo : from_hi;
                    const bool read = w[u] >= 0.0f && c < args.head_dim;
                    x[u] = read ? Floats<kVec>::load(partial_row + int64_t(s0 + k) * args.partial_split_stride + c)
                                : Floats<kVec>{};
                }
#pragma unroll
                for (int u = 0; u < kSplitsPerWarp; ++u) {
                    if (w[u] >= 0.0f) {
#pragma unroll
                        for (int v = 0; v < kVec; ++v) acc[v] += w[u] * x[u].v[v];
                    }
                }
            }
        }
#pragma unroll
        for (int v = 0; v < kVec; ++v) column_sums[warp][lane * kVec + v] = acc[v];
        __syncthreads();
        for (int t = threadIdx.x; t < kColumns; t += kThreads) {
            const int col = c0 + t;
            if (col < args.head_dim) {
                float sum = 0.0f;
#pragma unroll
                for (int w2 = 0; w2 < kWarps; ++w2) sum += column_sums[w2][t];
                store_out(args, out_at + col, nan_split ? NAN : sum);
            }
        }
        __syncthreads(); // column_sums is reused by the next pass
    }
    if (args.lse && threadIdx.x == 0)
        args.lse[b * args.lse_out_batch_stride + h * args.lse_out_head_stride + i * args.lse_out_row_stride] = lse * kLn2;
}

// Split-KV's own combine (launch_combine's every_split_allocated): the split-keys kernel writes
// every split's partials (an empty split as O = 0, lse = -inf), so all of a row's loads, partials
// and lse values, are issued at once, and the weighted sum needs no branch (an empty split weighs
// 0). Up to kSplitsPerChunk splits and 128 columns (a float4 per lane); warp w adds splits w, w +
// kWarps, ...; warp 0 alone turns the lse values into weights (two reductions over one warp, no
// online rescaling) and hands them over through shared memory. Straight-line code (see the top of
// this file for what the general kernel's one-round form cost here).
__global__ void __launch_bounds__(kThreads) split_kv_combine_kernel(const __grid_constant__ CombineArgs args) {
    constexpr int kSplitsPerWarp = kSplitsPerChunk / kWarps;
    __shared__ float weights[kSplitsPerChunk];
    __shared__ float4 column_sums[kWarps][32];
    wait_for_prerequisite_grid(); // the partials: written by the kernel before this one
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const auto [b, i, h] = output_row(args);
    const int num_splits = args.num_splits;
    const bool column_ok = lane * 4 < args.head_dim;

    // The lse values first (warp 0; lane j: splits j and j + 32), they are the critical path.
    const float* lse_at = args.lse_partial + b * args.lse_batch_stride + h * args.lse_head_stride +
                          i * args.lse_row_stride + int64_t(lane) * args.lse_split_stride;
    float lo = -INFINITY, hi = -INFINITY; // log2 units; -inf: empty or past the last split
    if (warp == 0 && lane < num_splits) lo = *lse_at;
    if (warp == 0 && lane + 32 < num_splits) hi = lse_at[32 * args.lse_split_stride];
    const float* partial = args.partial + b * args.partial_batch_stride + i * args.partial_row_stride +
                           h * args.partial_head_stride + int64_t(warp) * args.partial_split_stride + lane * 4;
    const int64_t step = kWarps * args.partial_split_stride;
    float4 x[kSplitsPerWarp];
#pragma unroll
    for (int u = 0; u < kSplitsPerWarp; ++u) {
        x[u] = warp + u * kWarps < num_splits && column_ok ? *reinterpret_cast<const float4*>(partial)
                                                           : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        partial += step;
    }
    if (warp == 0) {
        lo *= kLog2e;
        hi *= kLog2e;
        const float lse = warp_merged_lse2(lo, hi); // -inf: every split empty, every weight 0
        weights[lane] = LseSum::weight(lo, lse);
        weights[lane + 32] = LseSum::weight(hi, lse);
        if (args.lse && lane == 0)
            args.lse[b * args.lse_out_batch_stride + h * args.lse_out_head_stride + i * args.lse_out_row_stride] =
                lse * kLn2;
    }
    __syncthreads();
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int u = 0; u < kSplitsPerWarp; ++u) {
        const float w = weights[warp + u * kWarps];
        acc.x += w * x[u].x;
        acc.y += w * x[u].y;
        acc.z += w * x[u].z;
        acc.w += w * x[u].w;
    }
    column_sums[warp][lane] = acc;
    __syncthreads();
    if (warp != 0 || !column_ok) return;
    float sum[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int w = 0; w < kWarps; ++w) { // warp order: the sum does not depend on timing
        const float4 part = column_sums[w][lane];
        sum[0] += part.x;
        sum[1] += part.y;
        sum[2] += part.z;
        sum[3] += part.w;
    }
    const int64_t out_at = b * args.out_batch_stride + i * args.out_row_stride + h * args.out_head_stride + lane * 4;
#pragma unroll
    for (int v = 0; v < 4; ++v) store_out(args, out_at + v, sum[v]);
}

bool allows_float4_loads(const CombineArgs& args) {
    const auto multiple_of_4 = [](int64_t x) { return x % 4 == 0; };
    return reinterpret_cast<uintptr_t>(args.partial) % 16 == 0 && multiple_of_4(args.head_dim) &&
           multiple_of_4(args.partial_split_stride) && multiple_of_4(args.partial_batch_stride) &&
           multiple_of_4(args.partial_row_stride) && multiple_of_4(args.partial_head_stride);
}

} // namespace

void launch_combine(const CombineArgs& args, cudaStream_t stream, bool dependent, bool every_split_allocated) {
    const int64_t rows = args.batch * args.rows * args.heads;
    if (rows == 0) return;
    if (rows > INT_MAX) fail(FA_ERROR_UNSUPPORTED, "fa_combine: ", rows, " output rows are more than one launch covers");
    const bool float4_loads = allows_float4_loads(args);
    const unsigned blocks = unsigned(rows);
    if (every_split_allocated && float4_loads && args.head_dim <= 32 * 4 && args.num_splits <= kSplitsPerChunk) {
        launch_maybe_dependent(split_kv_combine_kernel, blocks, kThreads, 0, stream, dependent, args);
    } else if (float4_loads) {
        launch_maybe_dependent(combine_kernel<4>, blocks, kThreads, 0, stream, dependent, args);
    } else {
        launch_maybe_dependent(combine_kernel<1>, blocks, kThreads, 0, stream, dependent, args);
    }
}

} // namespace flashattn::cuda
