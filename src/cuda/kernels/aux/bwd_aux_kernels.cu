// dsum before the backward's main kernel, and the fixed-order fp32 sums into the outputs after it.
// Memory-bound and simple: a half warp per (row, head), lanes along the head dim, any strides;
// 16-byte loads (8-byte stores) where the tensors allow them, element by element otherwise.
//
// Why not a warp per row with one element per lane (the first version): at 16k tokens x 2048 of
// hidden size on the H200 that took 95 us (dsum) + 102 us (dQ sums) at d128 and 196 + 136 us at
// d64, 17-21% of a whole backward at 1k tokens per sequence (Nsight Compute, docs/perf-log.md),
// where the bytes moved need ~64 + 48 us at the copy rate: too little in flight per thread.
#include "kernels/aux/bwd_aux_kernels.h"

#include "host/cuda_check.h"
#include "device/bwd_policies.cuh"
#include "kernels/tiles.h"

#include <cutlass/numeric_types.h>

#include <climits>
#include <cstdint>
#include <type_traits>

namespace flashattn::cuda {
namespace {

using kernels::SequenceBounds;
using kernels::sequence_bounds;
using kernels::stored_k_rows;

constexpr int kLanesPerRow = 16; // a half warp per row
constexpr int kRowsPerCta = tiles::kRowKernelRows; // (the planner sizes dsink's terms by it)
constexpr int kThreads = kRowsPerCta * kLanesPerRow;

// Grid of (row block, sequence, head) CTAs, for rows up to max_rows per sequence.
struct RowGrid {
    int row_blocks;
    int64_t ctas;
};
RowGrid row_grid(int64_t max_rows, int64_t batch, int64_t heads) {
    RowGrid g{int((max_rows + kRowsPerCta - 1) / kRowsPerCta), 0};
    g.ctas = int64_t(g.row_blocks) * batch * heads;
    if (g.ctas > INT_MAX) fail(FA_ERROR_UNSUPPORTED, "the CUDA backward's row kernels need more than 2^31-1 CTAs");
    return g;
}

struct RowItem {
    int b, h, i;  // sequence, head, row within the sequence
    int lane;     // within the row's half warp
    SequenceBounds seq;
};
__device__ __forceinline__ RowItem row_item(const FwdArgs& fa, int heads, int row_blocks) {
    const int rb = int(blockIdx.x % unsigned(row_blocks));
    const int bh = int(blockIdx.x / unsigned(row_blocks));
    RowItem it;
    it.b = bh / heads;
    it.h = bh - it.b * heads;
    it.i = rb * kRowsPerCta + int(threadIdx.x / kLanesPerRow);
    it.lane = int(threadIdx.x % kLanesPerRow);
    it.seq = sequence_bounds(fa, it.b);
    return it;
}

// Sum over the half warp of a row. Both halves of a warp may not take part (a row past the
// sequence returns early), so the mask names this half only.
__device__ __forceinline__ float row_sum_lanes(float x) {
    const unsigned half = 0xffffu << (threadIdx.x % 32u & 16u);
    CUTE_UNROLL
    for (int d = kLanesPerRow / 2; d > 0; d /= 2) x += __shfl_xor_sync(half, x, d);
    return x;
}

// Whether every row of t starts on a `bytes` boundary (pointer and strides), for vector access.
bool rows_aligned(const fa_tensor& t, int element_bytes, int bytes) {
    const int64_t step = bytes / element_bytes;
    return reinterpret_cast<uintptr_t>(t.data) % unsigned(bytes) == 0 && t.batch_stride % step == 0 &&
           t.row_stride % step == 0 && t.head_stride % step == 0;
}

// 8 consecutive 16-bit values (one 16-byte load) -> fp32.
template <typename Element>
__device__ __forceinline__ void load8(const Element* p, float (&v)[8]) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const Element* e = reinterpret_cast<const Element*>(&raw);
    CUTE_UNROLL
    for (int j = 0; j < 8; ++j) v[j] = float(e[j]);
}

// dsink's share of a CTA's rows (one term each, 0 for rows past the sequence), added in row order:
// atomically into dsink[h], or (deterministic) into the CTA's slot of dsink_terms.
__device__ __forceinline__ void add_dsink_terms(const BwdArgs& args, const RowItem& it, float term, int row_blocks) {
    __shared__ float terms[kRowsPerCta];
    if (it.lane == 0) terms[threadIdx.x / kLanesPerRow] = term;
    __syncthreads();
    if (threadIdx.x != 0) return;
    float total = 0.0f;
    CUTE_UNROLL
    for (int r = 0; r < kRowsPerCta; ++r) total += terms[r];
    if (args.dsink_terms) {
        const int rb = int(blockIdx.x % unsigned(row_blocks));
        args.dsink_terms[(int64_t(it.h) * args.fwd.batch + it.b) * row_blocks + rb] = total;
    } else {
        atomicAdd(args.dsink + it.h, total);
    }
}

// kDsink: also dsink's terms (a template argument: the kernel without them keeps its registers).
template <typename Element, bool kDsink>
__global__ void __launch_bounds__(kThreads) dsum_kernel(const BwdArgs args, int row_blocks, bool vector_rows) {
    const FwdArgs& fa = args.fwd;
    const RowItem it = row_item(fa, fa.num_heads, row_blocks);
    const bool varlen = fa.cu_seqlens_q != nullptr;
    float sink_term = 0.0f;
    if (args.lse_log2_none && blockIdx.x == 0 && threadIdx.x == 0) *args.lse_log2_none = INFINITY;
    if (it.i < it.seq.q_len) { // the whole half warp: one row
        auto row = [&](const fa_tensor& t) {
            const int64_t offset = varlen ? (it.seq.q_row0 + it.i) * t.row_stride
                                          : int64_t(it.b) * t.batch_stride + int64_t(it.i) * t.row_stride;
            return static_cast<const Element*>(t.data) + offset + int64_t(it.h) * t.head_stride;
        };
        // The row's dQ scratch, zeroed in every chunk's buffer (16-byte stores; accum_cols is the tile
        // head dim, a multiple of 32, and the scratch is 256-byte aligned).
        const int64_t q_global_row = varlen ? it.seq.q_row0 + it.i : int64_t(it.b) * fa.seqlen_q + it.i;
        float* const dq_row = args.dq_accum + (int64_t(it.h) * args.q_rows_total + q_global_row) * args.accum_cols;
        const int dq_buffers = args.dq_chunk_stride != 0 ? args.num_chunks : 1;
        for (int t = 0; t < dq_buffers; ++t) {
            for (int c = it.lane * 4; c < args.accum_cols; c += kLanesPerRow * 4)
                *reinterpret_cast<float4*>(dq_row + t * args.dq_chunk_stride + c) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        // Ordered dQ: the counter of the row's query block, by its first row (the main kernel's
        // CTAs only count on blocks with rows, exactly the blocks whose first row is visited here).
        if (args.dq_semaphore && it.lane == 0 && it.i % args.dq_semaphore_rows == 0)
            args.dq_semaphore[(int64_t(it.b) * fa.num_heads + it.h) * args.dq_semaphore_blocks +
                              it.i / args.dq_semaphore_rows] = 0;
        const Element* out = row(fa.out);
        const Element* dout = row(args.dout);
        float sum = 0.0f;
        if (vector_rows) { // v_head_dim % 8 == 0, rows 16-byte aligned (bwd_dsum)
            for (int c = it.lane * 8; c < args.v_head_dim; c += kLanesPerRow * 8) {
                float o[8], d[8];
                load8(out + c, o);
                load8(dout + c, d);
                CUTE_UNROLL
                for (int j = 0; j < 8; ++j) sum += o[j] * d[j];
            }
        } else {
            for (int c = it.lane; c < args.v_head_dim; c += kLanesPerRow) sum += float(out[c]) * float(dout[c]);
        }
        sum = row_sum_lanes(sum);
        if (it.lane == 0) {
            const int64_t index = varlen ? int64_t(it.h) * fa.total_q + it.seq.q_row0 + it.i
                                         : (int64_t(it.b) * fa.num_heads + it.h) * fa.seqlen_q + it.i;
            args.dsum[index] = sum;
            const float lse = kDsink || args.lse_log2 ? fa.lse[index] : 0.0f; // (read once: the stores may alias)
            if (args.lse_log2) { // (the Hopper kernels: bwd_args.h)
                constexpr float kLog2e = 1.4426950408889634f;
                args.lse_log2[index] = lse == -INFINITY ? INFINITY : lse * kLog2e;
            }
            // The sink's probability in row i is exp(sink - lse_i) (lse includes the sink's term), its
            // dS = p_sink * (0 - dsum_i): the sink takes no value.
            if constexpr (kDsink) sink_term = -expf(fa.learnable_sink[it.h] - lse) * sum;
        }
    }
    if constexpr (kDsink) add_dsink_terms(args, it, sink_term, row_blocks); // (every thread: a CTA barrier)
}

// dsink[h] = the sum of head h's terms (dsink_terms), in order: a warp per head, each lane a fixed
// stride of them, then a fixed butterfly. The same result on every run.
__global__ void __launch_bounds__(32) dsink_sum_kernel(const float* terms, int64_t terms_per_head, float* dsink) {
    const float* head_terms = terms + int64_t(blockIdx.x) * terms_per_head;
    float sum = 0.0f;
    for (int64_t t = threadIdx.x; t < terms_per_head; t += 32) sum += head_terms[t];
    for (int offset = 16; offset > 0; offset /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    if (threadIdx.x == 0) dsink[blockIdx.x] = sum;
}

// dst row = scale * sum_t src[t * term_stride + row], rows of the q side (dQ, over chunks) or of
// the k side (dK, dV, over the query heads of a KV head).
struct RowSum {
    const float* src;
    int64_t term_stride; // elements between the terms
    int terms;
    int src_heads_per_dst_head;
    int64_t rows_total;  // rows per head of the scratch
    fa_tensor dst;
    int dst_heads;
    float scale;
    int cols;            // the real columns of dst
    bool key_rows;       // rows of k (all stored rows of the sequence) rather than of q
    bool vector_rows;    // cols % 4 == 0 and dst rows 8-byte aligned: 4 columns per access
};

template <typename Element>
__global__ void __launch_bounds__(kThreads) row_sum_kernel(const BwdArgs args, const RowSum job, int row_blocks) {
    const FwdArgs& fa = args.fwd;
    const RowItem it = row_item(fa, job.dst_heads, row_blocks);
    const int rows = job.key_rows ? stored_k_rows(fa, it.b) : it.seq.q_len;
    if (it.i >= rows) return;
    const bool varlen = fa.cu_seqlens_q != nullptr;
    const int64_t row0 = job.key_rows ? it.seq.k_row0 : it.seq.q_row0;
    const int64_t global_row = varlen ? row0 + it.i : int64_t(it.b) * (job.key_rows ? fa.seqlen_k : fa.seqlen_q) + it.i;
    const float* src = job.src + (int64_t(it.h) * job.src_heads_per_dst_head * job.rows_total + global_row) * args.accum_cols;
    const int64_t dst_offset = (varlen ? global_row * job.dst.row_stride
                                       : int64_t(it.b) * job.dst.batch_stride + int64_t(it.i) * job.dst.row_stride) +
                               int64_t(it.h) * job.dst.head_stride;
    Element* dst = static_cast<Element*>(job.dst.data) + dst_offset;
    if (job.vector_rows) {
        // src rows: accum_cols floats (a multiple of 32) in a 256-byte aligned scratch: float4 loads,
        // all of a lane's share of a row (up to kChunks of them) issued before its first store, so
        // that they are in flight together: loaded and stored one at a time, the dQ conversion took
        // 66.8 us at d128 16 x 1k (3.0 TB/s), 57.7 this way, as cuDNN's own (H200).
        constexpr int kChunks = 256 / (kLanesPerRow * 4); // a row of up to 256 columns in one pass
        for (int c0 = it.lane * 4; c0 < job.cols; c0 += kChunks * kLanesPerRow * 4) {
            float4 sum[kChunks];
            CUTE_UNROLL
            for (int k = 0; k < kChunks; ++k) sum[k] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            for (int t = 0; t < job.terms; ++t) {
                float4 v[kChunks]; // (each its own registers: loads into one would wait for each other)
                CUTE_UNROLL
                for (int k = 0; k < kChunks; ++k) {
                    const int c = c0 + k * kLanesPerRow * 4;
                    v[k] = c < job.cols ? *reinterpret_cast<const float4*>(src + t * job.term_stride + c)
                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                }
                CUTE_UNROLL
                for (int k = 0; k < kChunks; ++k) {
                    sum[k].x += v[k].x;
                    sum[k].y += v[k].y;
                    sum[k].z += v[k].z;
                    sum[k].w += v[k].w;
                }
            }
            CUTE_UNROLL
            for (int k = 0; k < kChunks; ++k) {
                const int c = c0 + k * kLanesPerRow * 4;
                if (c >= job.cols) continue;
                alignas(8) Element packed[4] = {Element(sum[k].x * job.scale), Element(sum[k].y * job.scale),
                                                Element(sum[k].z * job.scale), Element(sum[k].w * job.scale)};
                *reinterpret_cast<uint2*>(dst + c) = *reinterpret_cast<const uint2*>(packed);
            }
        }
    } else {
        for (int c = it.lane; c < job.cols; c += kLanesPerRow) {
            float sum = 0.0f;
            for (int t = 0; t < job.terms; ++t) sum += src[t * job.term_stride + c];
            dst[c] = Element(sum * job.scale);
        }
    }
}

template <typename Element>
void finish(const BwdArgs& args, cudaStream_t stream) {
    const FwdArgs& fa = args.fwd;
    auto run = [&](const RowSum& job, int64_t max_rows) {
        const RowGrid g = row_grid(max_rows, fa.batch, job.dst_heads);
        if (g.ctas == 0) return;
        row_sum_kernel<Element><<<unsigned(g.ctas), kThreads, 0, stream>>>(args, job, g.row_blocks);
        check_cuda(cudaGetLastError(), "launching the backward's finishing kernel");
    };
    // 4 columns (8 bytes of 16-bit output) per access where every row allows it.
    auto vector_rows = [&](const fa_tensor& dst, int cols) {
        return cols % 4 == 0 && rows_aligned(dst, int(sizeof(Element)), 4 * int(sizeof(Element)));
    };
    const bool deterministic = args.dq_chunk_stride != 0;
    const int dqk = args.qk_head_dim, dv = args.v_head_dim;
    run(RowSum{args.dq_accum, args.dq_chunk_stride, deterministic ? args.num_chunks : 1, 1, args.q_rows_total,
               args.dq, fa.num_heads, args.dq_scale, dqk, false, vector_rows(args.dq, dqk)},
        fa.seqlen_q);
    if (args.dk_accum) {
        const int64_t head_stride = args.k_rows_total * args.accum_cols;
        // Rows per KV head in the scratch: one (added to), or its query heads' or their pairs' (stored).
        const int group = args.dkv_add ? 1 : fa.heads_per_kv_head / args.group_heads;
        run(RowSum{args.dk_accum, head_stride, group, group, args.k_rows_total, args.dk, args.num_heads_k, 1.0f, dqk,
                   true, vector_rows(args.dk, dqk)},
            fa.seqlen_k);
        run(RowSum{args.dv_accum, head_stride, group, group, args.k_rows_total, args.dv, args.num_heads_k, 1.0f, dv,
                   true, vector_rows(args.dv, dv)},
            fa.seqlen_k);
    }
}

} // namespace

void bwd_dsum(const BwdArgs& args, fa_dtype dtype, cudaStream_t stream) {
    const FwdArgs& fa = args.fwd;
    const RowGrid g = row_grid(fa.seqlen_q, fa.batch, fa.num_heads);
    if (args.dsink && !args.dsink_terms) // the CTAs add to it (also what a call without rows leaves)
        check_cuda(cudaMemsetAsync(args.dsink, 0, size_t(fa.num_heads) * sizeof(float), stream), "zeroing dsink");
    if (g.ctas > 0) {
        // 16-byte loads (8 columns) where every row of O and dO allows them (16-bit elements).
        const bool vector_rows = args.v_head_dim % 8 == 0 && rows_aligned(fa.out, 2, 16) && rows_aligned(args.dout, 2, 16);
        auto launch = [&](auto kernel) { kernel<<<unsigned(g.ctas), kThreads, 0, stream>>>(args, g.row_blocks, vector_rows); };
        if (dtype == FA_FLOAT16) {
            launch(args.dsink ? dsum_kernel<cutlass::half_t, true> : dsum_kernel<cutlass::half_t, false>);
        } else {
            launch(args.dsink ? dsum_kernel<cutlass::bfloat16_t, true> : dsum_kernel<cutlass::bfloat16_t, false>);
        }
        check_cuda(cudaGetLastError(), "launching the backward's dsum kernel");
    }
    if (args.dsink && args.dsink_terms) {
        dsink_sum_kernel<<<unsigned(fa.num_heads), 32, 0, stream>>>(args.dsink_terms, int64_t(fa.batch) * g.row_blocks,
                                                                   args.dsink);
        check_cuda(cudaGetLastError(), "launching the backward's dsink sum");
    }
}

void bwd_finish(const BwdArgs& args, fa_dtype dtype, cudaStream_t stream) {
    if (dtype == FA_FLOAT16) {
        finish<cutlass::half_t>(args, stream);
    } else {
        finish<cutlass::bfloat16_t>(args, stream);
    }
}

} // namespace flashattn::cuda
