#include "kernels/aux/aux_kernels.h"

#include "host/cuda_check.h"
#include "device/dependent_launch.h"
#include "device/score_policies.cuh"

#include <flashattn/philox.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

namespace flashattn::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t items) {
    // Grid-stride loops below: a few waves of CTAs are plenty for these memory-bound helpers.
    return unsigned(std::max<int64_t>(1, std::min<int64_t>((items + kThreads - 1) / kThreads, 65536)));
}

__global__ void clear_kernel(unsigned* words, int count) {
    allow_dependent_launch(); // the dependent waits for this grid's completion before it reads the words
    for (int i = threadIdx.x; i < count; i += blockDim.x) words[i] = 0;
}

__global__ void pack_padded_kernel(StridedView src, uint16_t* dst, int64_t rows, int64_t heads, int cols,
                                   int padded_cols, int64_t total) {
    const uint16_t* in = static_cast<const uint16_t*>(src.data);
    for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int c = int(idx % padded_cols);
        int64_t rest = idx / padded_cols;
        const int64_t h = rest % heads;
        rest /= heads;
        const int64_t r = rest % rows;
        const int64_t b = rest / rows;
        dst[idx] = c < cols ? in[b * src.batch_stride + r * src.row_stride + h * src.head_stride + c] : uint16_t(0);
    }
}

__global__ void unpack_padded_kernel(const uint16_t* src, StridedView dst, int64_t rows, int64_t heads, int cols,
                                     int padded_cols, int64_t total) {
    uint16_t* out = static_cast<uint16_t*>(dst.data);
    for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int c = int(idx % cols);
        int64_t rest = idx / cols;
        const int64_t h = rest % heads;
        rest /= heads;
        const int64_t r = rest % rows;
        const int64_t b = rest / rows;
        out[b * dst.batch_stride + r * dst.row_stride + h * dst.head_stride + c] =
            src[((b * rows + r) * heads + h) * padded_cols + c];
    }
}

__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

// Element (b, h, i, j) of (batch, heads, seqlen_q, seqlen_k): query i and key j of sequence b (varlen:
// seqlen_q/k are the maxima, elements past a sequence's lengths are 0), exp(score - lse), negated
// where dropout dropped it.
template <typename T>
__global__ void attn_probs_kernel(const FwdArgs args, float* probs) {
    const int64_t Sq = args.seqlen_q, Sk = args.seqlen_k, H = args.num_heads;
    const int64_t total = int64_t(args.batch) * H * Sq * Sk;
    const bool varlen = args.cu_seqlens_q != nullptr;
    const DropoutKey key = args.dropout ? args.dropout_key() : DropoutKey{};
    for (int64_t idx = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; idx < total;
         idx += int64_t(gridDim.x) * blockDim.x) {
        const int64_t j = idx % Sk;
        const int64_t i = (idx / Sk) % Sq;
        const int64_t h = (idx / (Sk * Sq)) % H;
        const int64_t b = idx / (Sk * Sq * H);
        const kernels::SequenceBounds seq = kernels::sequence_bounds(args, int(b));
        const int64_t q_len = seq.q_len, k_len = seq.k_len;
        float value = 0.0f;
        if (i < q_len && j < k_len) {
            const float lse = args.lse[varlen ? h * args.total_q + seq.q_row0 + i : (b * H + h) * Sq + i];
            if (lse != -INFINITY && args.mask.allowed(i, j, q_len, k_len)) {
                const auto row = [&](const fa_tensor& t, int64_t row0, int64_t r, int64_t head) {
                    return static_cast<const T*>(t.data) + (varlen ? 0 : b * t.batch_stride) + (row0 + r) * t.row_stride +
                           head * t.head_stride;
                };
                const T* q = row(args.q, seq.q_row0, i, h);
                const T* k = row(args.k, seq.k_row0, j, h / args.heads_per_kv_head);
                float dot = 0.0f;
                for (int c = 0; c < args.head_dim; ++c) dot = fmaf(to_float(q[c]), to_float(k[c]), dot);
                const float slope = args.alibi_slopes ? args.alibi_slopes[b * args.alibi_batch_stride + h] : 0.0f;
                const float score = transform_score<float>(dot * args.scale, args.softcap, slope, i, j, q_len, k_len);
                value = expf(score - lse);
            }
            if (args.dropout) {
                const DropoutRow rng(key.seed, key.offset, b, H, h, i);
                if (rng.bits_for_column(j) >= args.keep_threshold) value = -value;
            }
        }
        probs[idx] = value;
    }
}

} // namespace

void pack_padded(StridedView src, void* dst, int64_t batch, int64_t rows, int64_t heads, int cols, int padded_cols,
                 cudaStream_t stream) {
    const int64_t total = batch * rows * heads * padded_cols;
    if (total == 0) return;
    pack_padded_kernel<<<grid_for(total), kThreads, 0, stream>>>(src, static_cast<uint16_t*>(dst), rows, heads, cols,
                                                                 padded_cols, total);
    check_cuda(cudaGetLastError(), "launching the layout staging kernel");
}

void unpack_padded(const void* src, StridedView dst, int64_t batch, int64_t rows, int64_t heads, int cols,
                   int padded_cols, cudaStream_t stream) {
    const int64_t total = batch * rows * heads * cols;
    if (total == 0) return;
    unpack_padded_kernel<<<grid_for(total), kThreads, 0, stream>>>(static_cast<const uint16_t*>(src), dst, rows, heads,
                                                                   cols, padded_cols, total);
    check_cuda(cudaGetLastError(), "launching the output unstaging kernel");
}

void write_attn_probs(const FwdArgs& args, fa_dtype dtype, float* attn_probs, cudaStream_t stream) {
    const int64_t total = int64_t(args.batch) * args.num_heads * args.seqlen_q * args.seqlen_k;
    if (total == 0) return;
    if (dtype == FA_FLOAT16) {
        attn_probs_kernel<__half><<<grid_for(total), kThreads, 0, stream>>>(args, attn_probs);
    } else {
        attn_probs_kernel<__nv_bfloat16><<<grid_for(total), kThreads, 0, stream>>>(args, attn_probs);
    }
    check_cuda(cudaGetLastError(), "launching the attn_probs kernel");
}

void clear_for_dependent(unsigned* words, int count, cudaStream_t stream) {
    clear_kernel<<<1, 32, 0, stream>>>(words, count);
    check_cuda(cudaGetLastError(), "launching the clearing kernel");
}

} // namespace flashattn::cuda
