// The CUDA backend's entry points (core/backend.h): device checks, FwdArgs from a validated
// Problem, layout staging where the kernel cannot read the tensors directly, and dispatch to the
// per-(head dim, dtype) launchers.
#include "aux_kernels.h"
#include "build_config.h"
#include "cuda_check.h"
#include "fwd_args.h"
#include "fwd_launch.h"

#include "core/backend.h"
#include "core/error.h"
#include "core/problem.h"

#include <flashattn/philox.h>

#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

namespace flashattn::cuda {
namespace {

// Switches to the device that holds the tensors for the duration of a call.
class DeviceGuard {
public:
    explicit DeviceGuard(int device) {
        check_cuda(cudaGetDevice(&previous_), "querying the current device");
        if (device != previous_) check_cuda(cudaSetDevice(device), "selecting the tensors' device");
    }
    ~DeviceGuard() {
        int current = previous_;
        if (cudaGetDevice(&current) == cudaSuccess && current != previous_) (void)cudaSetDevice(previous_);
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int previous_ = 0;
};

// Stream-ordered scratch memory, released on the same stream when the call ends.
class StreamBuffer {
public:
    StreamBuffer(size_t bytes, cudaStream_t stream) : stream_(stream) {
        if (bytes) check_cuda(cudaMallocAsync(&data_, bytes, stream), "allocating device scratch memory");
    }
    ~StreamBuffer() {
        if (data_) (void)cudaFreeAsync(data_, stream_);
    }
    StreamBuffer(const StreamBuffer&) = delete;
    StreamBuffer& operator=(const StreamBuffer&) = delete;
    void* get() const { return data_; }

private:
    void* data_ = nullptr;
    cudaStream_t stream_;
};

// The device of a pointer, or -1 when the CUDA runtime does not know it as device memory.
int device_of(const void* ptr) {
    if (!ptr) return -1;
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
        (void)cudaGetLastError(); // a host pointer can leave an error behind; it must not leak into the next call
        return -1;
    }
    const bool on_device = attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
    return on_device ? attributes.device : -1;
}

void require_on_device(const void* ptr, int device, const char* name) {
    if (!ptr) return;
    const int where = device_of(ptr);
    require(where >= 0, name, " is not CUDA device memory, but q is: every tensor and array of a CUDA call must be");
    require(where == device, name, " is on CUDA device ", where, " but q is on device ", device);
}

// The kernel reads and writes 16-byte chunks: base addresses 16-byte aligned, strides and the
// head dim multiples of 8 elements. Other layouts are staged through packed copies.
bool chunk_aligned(const fa_tensor& t, bool varlen) {
    const auto aligned = [](int64_t stride) { return stride % 8 == 0; };
    return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && aligned(t.row_stride) && aligned(t.head_stride) &&
           (varlen || aligned(t.batch_stride));
}

// The smallest compiled tile head dim that holds head_dim (FLASHATTN_HEADDIMS decides which exist).
int tile_head_dim(int head_dim) {
    for (const int compiled : {FLASHATTN_CUDA_HEADDIM_LIST}) {
        if (head_dim <= compiled) return compiled;
    }
    fail(FA_ERROR_UNSUPPORTED, "head_dim ", head_dim, " has no CUDA kernel in this build (FLASHATTN_HEADDIMS=",
         FLASHATTN_CUDA_HEADDIMS_STRING, "); rebuild with a head dim >= ", head_dim);
}

template <fa_dtype kDtype>
void run_forward_kernel(int tile_dim, const FwdArgs& args, cudaStream_t stream) {
    switch (tile_dim) {
#define FLASHATTN_HEADDIM_CASE(D) \
    case D: return run_fwd<D, kDtype>(args, stream);
#ifdef FLASHATTN_CUDA_HDIM_32
        FLASHATTN_HEADDIM_CASE(32)
#endif
#ifdef FLASHATTN_CUDA_HDIM_64
        FLASHATTN_HEADDIM_CASE(64)
#endif
#ifdef FLASHATTN_CUDA_HDIM_96
        FLASHATTN_HEADDIM_CASE(96)
#endif
#ifdef FLASHATTN_CUDA_HDIM_128
        FLASHATTN_HEADDIM_CASE(128)
#endif
#ifdef FLASHATTN_CUDA_HDIM_192
        FLASHATTN_HEADDIM_CASE(192)
#endif
#ifdef FLASHATTN_CUDA_HDIM_256
        FLASHATTN_HEADDIM_CASE(256)
#endif
#undef FLASHATTN_HEADDIM_CASE
    }
    fail(FA_ERROR_INTERNAL, "no forward kernel for tile head dim ", tile_dim);
}

int64_t round_up8(int64_t x) { return (x + 7) / 8 * 8; }

} // namespace

bool available() {
    static const bool usable = [] {
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        for (int device = 0; device < count; ++device) {
            int major = 0;
            if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess &&
                major >= 8)
                return true;
        }
        (void)cudaGetLastError();
        return false;
    }();
    return usable;
}

bool is_device_pointer(const void* ptr) { return device_of(ptr) >= 0; }

void forward(const Problem& problem) {
    const fa_fwd_params& p = problem.p;
    require(p.dtype == FA_FLOAT16 || p.dtype == FA_BFLOAT16, "dtype must be FA_FLOAT16 or FA_BFLOAT16 on CUDA");

    const int device = device_of(p.q.data);
    require(device >= 0 || problem.total_q == 0, "q.data is not CUDA device memory");
    if (problem.total_q == 0) return; // nothing to compute or write
    require_on_device(p.k.data, device, "k.data");
    require_on_device(p.v.data, device, "v.data");
    require_on_device(p.out.data, device, "out.data");
    require_on_device(p.softmax_lse, device, "softmax_lse");
    require_on_device(p.cu_seqlens_q, device, "cu_seqlens_q");
    require_on_device(p.cu_seqlens_k, device, "cu_seqlens_k");
    require_on_device(p.seqused_k, device, "seqused_k");
    require_on_device(p.alibi_slopes, device, "alibi_slopes");
    require_on_device(p.attn_probs, device, "attn_probs");

    DeviceGuard guard(device);
    int major = 0, minor = 0;
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "querying the device");
    check_cuda(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device), "querying the device");
    if (major < 8)
        fail(FA_ERROR_UNSUPPORTED, "the CUDA backend needs compute capability 8.0 or newer; device ", device, " is ",
             major, ".", minor);
    // Row indices inside the kernel are 32-bit (offsets are 64-bit); keep a block's worth of headroom.
    if (p.seqlen_q > INT_MAX - 256 || p.seqlen_k > INT_MAX - 256)
        fail(FA_ERROR_UNSUPPORTED, "seqlen_q/seqlen_k above 2^31-257 are not supported by the CUDA backend");

    const auto stream = static_cast<cudaStream_t>(p.stream);
    const bool varlen = problem.varlen;

    FwdArgs args{};
    args.q = p.q;
    args.k = p.k;
    args.v = p.v;
    args.out = p.out;
    args.lse = p.softmax_lse;
    args.batch = p.batch;
    args.num_heads = p.num_heads;
    args.heads_per_kv_head = int32_t(problem.group);
    args.head_dim = p.head_dim;
    args.seqlen_q = p.seqlen_q;
    args.seqlen_k = p.seqlen_k;
    args.cu_seqlens_q = varlen ? p.cu_seqlens_q : nullptr;
    args.cu_seqlens_k = varlen ? p.cu_seqlens_k : nullptr;
    args.seqused_k = p.seqused_k;
    args.total_q = problem.total_q;
    args.total_k = varlen ? p.total_k : int64_t(p.batch) * p.seqlen_k;
    args.scale = problem.scale;
    args.scale_log2 = problem.scale_log2;
    args.softcap = p.softcap;
    args.mask = problem.mask;
    args.alibi_slopes = p.alibi_slopes;
    args.alibi_batch_stride = p.alibi_batch_stride;
    // Raw Q.K^T can feed the softmax (scale folded into exp2) unless something transforms the
    // scores, or a non-positive scale would turn the row max into a row min.
    args.transform_scores = p.softcap > 0.0f || p.alibi_slopes != nullptr || !(problem.scale > 0.0f);
    args.dropout = problem.has_dropout();
    args.keep_threshold = dropout_keep_threshold(p.dropout_p);
    args.keep_rescale = args.dropout ? float(1.0 / (1.0 - double(p.dropout_p))) : 1.0f;
    args.rng_seed = p.rng_seed;
    args.rng_offset = p.rng_offset;

    // Layouts the kernel cannot address in 16-byte chunks go through packed, zero-padded copies.
    const int64_t dense_batch = varlen ? 1 : p.batch;
    const int64_t q_rows = varlen ? problem.total_q : p.seqlen_q;
    const int64_t k_rows = varlen ? p.total_k : p.seqlen_k;
    const bool pad_head_dim = p.head_dim % 8 != 0;
    const int padded_dim = int(round_up8(p.head_dim));
    auto packed_view = [&](void* data, int64_t rows) {
        return fa_tensor{data, rows * p.num_heads * padded_dim, int64_t(p.num_heads) * padded_dim, padded_dim};
    };
    auto stage_input = [&](fa_tensor& t, int64_t rows, int64_t heads, StreamBuffer& buffer) {
        StridedView src{t.data, varlen ? 0 : t.batch_stride, t.row_stride, t.head_stride};
        pack_padded(src, buffer.get(), dense_batch, rows, heads, p.head_dim, padded_dim, stream);
        t = fa_tensor{buffer.get(), rows * heads * padded_dim, heads * padded_dim, padded_dim};
    };
    const auto bytes = [&](int64_t rows, int64_t heads) { return size_t(dense_batch * rows * heads * padded_dim * 2); };
    const bool stage_q = pad_head_dim || !chunk_aligned(p.q, varlen);
    const bool stage_k = k_rows > 0 && (pad_head_dim || !chunk_aligned(p.k, varlen));
    const bool stage_v = k_rows > 0 && (pad_head_dim || !chunk_aligned(p.v, varlen));
    const bool stage_out = pad_head_dim || !chunk_aligned(p.out, varlen);
    StreamBuffer q_buffer(stage_q ? bytes(q_rows, p.num_heads) : 0, stream);
    StreamBuffer k_buffer(stage_k ? bytes(k_rows, p.num_heads_k) : 0, stream);
    StreamBuffer v_buffer(stage_v ? bytes(k_rows, p.num_heads_k) : 0, stream);
    StreamBuffer out_buffer(stage_out ? bytes(q_rows, p.num_heads) : 0, stream);
    if (stage_q) stage_input(args.q, q_rows, p.num_heads, q_buffer);
    if (stage_k) stage_input(args.k, k_rows, p.num_heads_k, k_buffer);
    if (stage_v) stage_input(args.v, k_rows, p.num_heads_k, v_buffer);
    if (stage_out) args.out = packed_view(out_buffer.get(), q_rows);
    if (pad_head_dim) args.head_dim = padded_dim; // the padding columns are zero in q and k: scores unchanged

    // attn_probs is derived from the lse, so it needs one even when the caller did not ask.
    StreamBuffer lse_buffer(p.attn_probs && !p.softmax_lse ? size_t(p.batch) * p.num_heads * p.seqlen_q * 4 : 0,
                            stream);
    if (p.attn_probs && !p.softmax_lse) args.lse = static_cast<float*>(lse_buffer.get());

    const int tile_dim = tile_head_dim(args.head_dim);
#ifdef FLASHATTN_CUDA_TUNING
    if (!run_fwd_tile_variant(args, p.dtype, tile_dim, stream))
#endif
    {
        if (p.dtype == FA_FLOAT16) {
            run_forward_kernel<FA_FLOAT16>(tile_dim, args, stream);
        } else {
            run_forward_kernel<FA_BFLOAT16>(tile_dim, args, stream);
        }
    }

    if (stage_out) {
        StridedView dst{p.out.data, varlen ? 0 : p.out.batch_stride, p.out.row_stride, p.out.head_stride};
        unpack_padded(out_buffer.get(), dst, dense_batch, q_rows, p.num_heads, p.head_dim, padded_dim, stream);
    }
    if (p.attn_probs) write_attn_probs(args, p.dtype, p.attn_probs, stream);
}

void backward(const BwdProblem&) { fail(FA_ERROR_UNSUPPORTED, "the CUDA backward is not implemented yet"); }

size_t bwd_workspace_size(const BwdProblem&) { return 0; }

} // namespace flashattn::cuda
