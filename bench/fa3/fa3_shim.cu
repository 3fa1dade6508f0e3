// C entry points to FlashAttention-3's Hopper forward and backward, so the benchmarks can time them
// beside ours and torch's backends in one process. Built only by bench/fa3/build.sh against a FlashAttention-3
// checkout (its hopper/ folder); nothing in the library includes it.
//
// One problem form: bf16, dense (batch, seqlen, heads, d) tensors with a contiguous last dim, causal
// or not, no split, no packing of GQA heads, as FlashAttention-3's own API picks for these shapes
// (its split heuristic gives 1 split and its PackGQA heuristic no packing where seqlen_q is a
// multiple of the tile). The causal scheduler's tile counter is cleared on the stream every call, as
// the API does with a fresh zeroed tensor.
#include <cuda_runtime.h>
#include <cmath>
#include <cstring>

#include "flash.h"
#include "cutlass/numeric_types.h"

namespace {
int sm_count() {
    static int count = [] {
        int dev = 0, n = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev);
        return n;
    }();
    return count;
}

// The backward's float scratch, grown as needed and kept: FlashAttention-3's API takes it from torch's
// caching allocator, which costs a call nothing either once warm.
void *scratch(size_t bytes) {
    static void *buffer = nullptr;
    static size_t size = 0;
    if (bytes > size) {
        cudaFree(buffer);
        buffer = nullptr;
        size = 0;
        if (cudaMalloc(&buffer, bytes) != cudaSuccess) return nullptr;
        size = bytes;
    }
    return buffer;
}

int round_up(int x, int m) { return (x + m - 1) / m * m; }

void set_forward_params(Flash_fwd_params &p, void *q, void *k, void *v, void *out, void *lse, int b, int sq,
                        int sk, int h, int hk, int d, const long long *strides, int causal) {
    std::memset(&p, 0, sizeof(p));
    p.is_bf16 = true;
    p.q_ptr = q; p.k_ptr = k; p.v_ptr = v; p.o_ptr = out;
    p.q_batch_stride = strides[0]; p.q_row_stride = strides[1]; p.q_head_stride = strides[2];
    p.k_batch_stride = strides[3]; p.k_row_stride = strides[4]; p.k_head_stride = strides[5];
    p.v_batch_stride = strides[6]; p.v_row_stride = strides[7]; p.v_head_stride = strides[8]; p.v_dim_stride = 1;
    p.o_batch_stride = strides[9]; p.o_row_stride = strides[10]; p.o_head_stride = strides[11];
    p.softmax_lse_ptr = lse;
    p.b = b; p.b_k = b; p.h = h; p.h_k = hk;
    p.seqlen_q = sq; p.seqlen_k = sk;
    p.seqlen_q_rounded = round_up(sq, 128); p.seqlen_k_rounded = round_up(sk, 128);
    p.total_q = b * sq; p.total_k = b * sk;
    p.d = d; p.d_rounded = d; p.dv = d; p.dv_rounded = d;
    p.scale_softmax = 1.0f / std::sqrt(float(d));
    p.p_dropout = 1.f; p.rp_dropout = 1.f; p.p_dropout_in_uint8_t = 255;
    p.is_causal = causal != 0;
    p.is_local = false;
    p.window_size_left = sk - 1;
    p.window_size_right = causal ? 0 : sq - 1;
    p.page_size = 1;
    p.num_splits = 1;
    p.pack_gqa = false;
    p.arch = 90;
    p.num_sm = sm_count();
}
}  // namespace

// q (b, sq, h, d), k / v (b, sk, hk, d), out (b, sq, h, d); strides: element strides of batch, row
// and head of q, k, v, out (12 values). lse: b * h * sq floats. counter: one int of device memory.
// Returns 0, -1 for a head dim this build lacks, or a CUDA error code.
extern "C" int fa3_forward(void *q, void *k, void *v, void *out, float *lse, int *counter, int b, int sq, int sk,
                           int h, int hk, int d, const long long *strides, int causal, cudaStream_t stream) {
    Flash_fwd_params p;
    set_forward_params(p, q, k, v, out, lse, b, sq, sk, h, hk, d, strides, causal);
    if (p.is_causal) {
        if (cudaError_t e = cudaMemsetAsync(counter, 0, sizeof(int), stream)) return int(e);
        p.tile_count_semaphore = counter;
    }
    switch (d) {
#ifdef FA3_SHIM_HDIM64
        case 64: run_mha_fwd_<90, cutlass::bfloat16_t, 64, 64, false, false, false, false>(p, stream); break;
#endif
#ifdef FA3_SHIM_HDIM128
        case 128: run_mha_fwd_<90, cutlass::bfloat16_t, 128, 128, false, false, false, false>(p, stream); break;
#endif
#ifdef FA3_SHIM_HDIM256
        case 256: run_mha_fwd_<90, cutlass::bfloat16_t, 256, 256, false, false, false, false>(p, stream); break;
#endif
        default: return -1;
    }
    return int(cudaGetLastError());
}

// The backward of the same problem: dout and out like q, dq like q, dk / dv like k; strides: the
// forward's 12, then dout's, dq's, dk's, dv's (24 in all), all with the same head dim. lse: the
// forward's. Scratch as FlashAttention-3's API sizes it (its tiles per head dim on sm_90): D and lse in
// log2 per padded row, dQ's fp32 accumulator, and for GQA dK / dV's fp32 accumulators, cleared each
// call as the API's torch.zeros does (and the deterministic mode's dK / dV semaphores).
extern "C" int fa3_backward(void *dout, void *q, void *k, void *v, void *out, float *lse, void *dq, void *dk,
                            void *dv, int b, int sq, int sk, int h, int hk, int d, const long long *strides,
                            int causal, int deterministic, cudaStream_t stream) {
#ifdef FA3_SHIM_BACKWARD
    Flash_bwd_params p;
    std::memset(&p, 0, sizeof(p));
    set_forward_params(p, q, k, v, out, lse, b, sq, sk, h, hk, d, strides, causal);
    int const block_m = d <= 64 ? 128 : d <= 128 ? (causal ? 64 : 80) : 64;
    int const block_n = d <= 128 ? 128 : 80;
    int const sq_r = round_up(sq, block_m), sk_r = round_up(sk, block_n);
    p.seqlen_q_rounded = sq_r; p.seqlen_k_rounded = sk_r;
    p.do_ptr = dout; p.dq_ptr = dq; p.dk_ptr = dk; p.dv_ptr = dv;
    p.do_batch_stride = strides[12]; p.do_row_stride = strides[13]; p.do_head_stride = strides[14];
    p.dq_batch_stride = strides[15]; p.dq_row_stride = strides[16]; p.dq_head_stride = strides[17];
    p.dk_batch_stride = strides[18]; p.dk_row_stride = strides[19]; p.dk_head_stride = strides[20];
    p.dv_batch_stride = strides[21]; p.dv_row_stride = strides[22]; p.dv_head_stride = strides[23];
    p.deterministic = deterministic != 0;
    size_t const rows = size_t(b) * h * sq_r, kv = size_t(b) * hk * sk_r * d;
    size_t const m_blocks = size_t((sq + block_m - 1) / block_m) * b * h;
    size_t const n_blocks = size_t((sk + block_n - 1) / block_n) * b * hk;
    bool const gqa = h != hk;
    size_t const floats = 2 * rows + rows * d + (gqa ? 2 * kv : 0);
    size_t const ints = m_blocks + (gqa ? 2 * n_blocks : 0);
    char *base = static_cast<char *>(scratch(floats * 4 + ints * 4 + 256));
    if (!base) return int(cudaErrorMemoryAllocation);
    float *f = reinterpret_cast<float *>(base);
    p.dsoftmax_sum = f; f += rows;
    p.softmax_lse_log2_ptr = f; f += rows;
    p.dq_accum_ptr = f; f += rows * d;
    if (gqa) {
        p.dk_accum_ptr = f; f += kv;
        p.dv_accum_ptr = f; f += kv;
        if (cudaError_t e = cudaMemsetAsync(p.dk_accum_ptr, 0, 2 * kv * 4, stream)) return int(e);
    }
    int *sem = reinterpret_cast<int *>(f);
    p.dq_semaphore = sem;
    if (gqa && p.deterministic) {
        p.dk_semaphore = sem + m_blocks;
        p.dv_semaphore = sem + m_blocks + n_blocks;
        if (cudaError_t e = cudaMemsetAsync(p.dk_semaphore, 0, 2 * n_blocks * 4, stream)) return int(e);
    }
    switch (d) {
#ifdef FA3_SHIM_HDIM64
        case 64: run_mha_bwd_<90, cutlass::bfloat16_t, 64, false>(p, stream); break;
#endif
#ifdef FA3_SHIM_HDIM128
        case 128: run_mha_bwd_<90, cutlass::bfloat16_t, 128, false>(p, stream); break;
#endif
#ifdef FA3_SHIM_HDIM256
        case 256: run_mha_bwd_<90, cutlass::bfloat16_t, 256, false>(p, stream); break;
#endif
        default: return -1;
    }
    return int(cudaGetLastError());
#else
    return -1;
#endif
}
