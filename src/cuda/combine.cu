// fa_combine on the device (docs/semantics.md, "Combining partial results"), also the last step of
// split-KV. One warp per (output row, 32 columns): the lanes share the splits for the max and the
// sum of exp(lse_s - max), then each lane accumulates its column over the non-empty splits, taking
// the splits 32 at a time: lane j holds split s0 + j's weight, the others read it by shuffle, and
// the partials of kSplitsInFlight splits are loaded before any is added (decode's combine reads a
// few hundred KB that the forward has just written: what it costs is load latency, so the loads of
// one lane must not wait for each other). A split with lse = -inf is never read (its output may be
// uninitialised); a row with no non-empty split gets out = 0 and lse = -inf.
//
// After split-KV's split-keys kernel it can be launched as a programmatic dependent
// (FLASHATTN_CUDA_PDL=1, dependent_launch.h: measured no faster), so it waits for the partials first.
#include "combine.h"

#include "cuda_check.h"
#include "dependent_launch.h"
#include "device_scope.h"

#include "core/backend.h"
#include "core/error.h"
#include "core/problem.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cmath>

namespace flashattn::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;

__device__ __forceinline__ float warp_max(float x) {
    for (int offset = 16; offset > 0; offset /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}
__device__ __forceinline__ float warp_sum(float x) {
    for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

__global__ void __launch_bounds__(32 * kWarpsPerBlock) combine_kernel(const __grid_constant__ CombineArgs args) {
    constexpr int kSplitsInFlight = 16;
    wait_for_prerequisite_grid(); // the partials: written by the kernel before this one
    const int lane = threadIdx.x % 32;
    const int64_t column_groups = (args.head_dim + 31) / 32;
    const int64_t item = int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
    if (item >= args.batch * args.rows * args.heads * column_groups) return;
    const int c = int(item % column_groups) * 32 + lane; // this lane's column
    const int64_t row_item = item / column_groups;
    const int64_t h = row_item % args.heads;
    const int64_t i = (row_item / args.heads) % args.rows;
    const int64_t b = row_item / (args.heads * args.rows);

    const float* lse_row = args.lse_partial + b * args.lse_batch_stride + h * args.lse_head_stride + i * args.lse_row_stride;
    auto split_lse = [&](int s) { return lse_row[int64_t(s) * args.lse_split_stride]; };
    float row_max = -INFINITY;
    for (int s = lane; s < args.num_splits; s += 32) row_max = fmaxf(row_max, split_lse(s));
    row_max = warp_max(row_max);
    float lse = -INFINITY;
    if (row_max > -INFINITY) {
        float sum = 0.0f;
        for (int s = lane; s < args.num_splits; s += 32) {
            const float l = split_lse(s);
            if (l > -INFINITY) sum += expf(l - row_max);
        }
        lse = row_max + logf(warp_sum(sum));
    }

    const float* partial_row = args.partial + b * args.partial_batch_stride + i * args.partial_row_stride +
                               h * args.partial_head_stride;
    float acc = 0.0f;
    if (lse > -INFINITY) {
        for (int s0 = 0; s0 < args.num_splits; s0 += 32) {
            // Lane j: the weight of split s0 + j, or -1 for an empty split (and past the last).
            const float l = s0 + lane < args.num_splits ? split_lse(s0 + lane) : -INFINITY;
            const float weight = l > -INFINITY ? expf(l - lse) : -1.0f;
            const int here = min(32, args.num_splits - s0);
            for (int u0 = 0; u0 < here; u0 += kSplitsInFlight) {
                float w[kSplitsInFlight], x[kSplitsInFlight];
#pragma unroll
                for (int u = 0; u < kSplitsInFlight; ++u) {
                    w[u] = __shfl_sync(0xffffffffu, weight, (u0 + u) % 32);
                    const bool read = u0 + u < here && w[u] >= 0.0f && c < args.head_dim;
                    x[u] = read ? partial_row[int64_t(s0 + u0 + u) * args.partial_split_stride + c] : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < kSplitsInFlight; ++u) {
                    if (u0 + u < here && w[u] >= 0.0f) acc += w[u] * x[u]; // in split order, as before
                }
            }
        }
    }
    const int64_t out_at = b * args.out_batch_stride + i * args.out_row_stride + h * args.out_head_stride;
    if (c < args.head_dim) {
        switch (args.out_dtype) {
            case FA_FLOAT16: static_cast<__half*>(args.out)[out_at + c] = __float2half_rn(acc); break;
            case FA_BFLOAT16: static_cast<__nv_bfloat16*>(args.out)[out_at + c] = __float2bfloat16_rn(acc); break;
            default: static_cast<float*>(args.out)[out_at + c] = acc; break;
        }
    }
    if (args.lse && lane == 0 && item % column_groups == 0)
        args.lse[b * args.lse_out_batch_stride + h * args.lse_out_head_stride + i * args.lse_out_row_stride] = lse;
}

} // namespace

void launch_combine(const CombineArgs& args, cudaStream_t stream, bool dependent) {
    const int64_t items = args.batch * args.rows * args.heads * ((args.head_dim + 31) / 32);
    if (items == 0) return;
    const int64_t blocks = (items + kWarpsPerBlock - 1) / kWarpsPerBlock;
    if (blocks > INT_MAX)
        fail(FA_ERROR_UNSUPPORTED, "fa_combine: ", items, " (row, 32 columns) items are more than one launch covers");
    launch_maybe_dependent(combine_kernel, unsigned(blocks), 32 * kWarpsPerBlock, 0, stream, dependent, args);
}

void combine(const CombineProblem& problem) {
    const fa_combine_params& p = problem.p;
    if (int64_t(p.batch) * p.seqlen_q * p.num_heads == 0) return;
    const int device = device_of(p.out_partial.data);
    require(device >= 0, "out_partial.data is not CUDA device memory");
    require_on_device(p.lse_partial.data, device, "lse_partial.data");
    require_on_device(p.out.data, device, "out.data");
    require_on_device(p.lse.data, device, "lse.data");
    DeviceGuard guard(device);

    CombineArgs args{};
    args.num_splits = p.num_splits;
    args.batch = p.batch;
    args.rows = p.seqlen_q;
    args.heads = p.num_heads;
    args.head_dim = p.head_dim;
    args.partial = static_cast<const float*>(p.out_partial.data);
    args.partial_split_stride = p.out_partial_split_stride;
    args.partial_batch_stride = p.out_partial.batch_stride;
    args.partial_row_stride = p.out_partial.row_stride;
    args.partial_head_stride = p.out_partial.head_stride;
    args.lse_partial = p.lse_partial.data;
    args.lse_split_stride = p.lse_partial_split_stride;
    args.lse_batch_stride = p.lse_partial.batch_stride;
    args.lse_head_stride = p.lse_partial.head_stride;
    args.lse_row_stride = p.lse_partial.row_stride;
    args.out = p.out.data;
    args.out_dtype = p.dtype;
    args.out_batch_stride = p.out.batch_stride;
    args.out_row_stride = p.out.row_stride;
    args.out_head_stride = p.out.head_stride;
    args.lse = p.lse.data;
    args.lse_out_batch_stride = p.lse.batch_stride;
    args.lse_out_head_stride = p.lse.head_stride;
    args.lse_out_row_stride = p.lse.row_stride;
    launch_combine(args, static_cast<cudaStream_t>(p.stream), false);
}

} // namespace flashattn::cuda
