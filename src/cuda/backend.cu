// The CUDA backend's entry points (core/backend.h): device checks, FwdArgs from a validated
// Problem, layout staging where the kernel cannot read the tensors directly, and dispatch to the
// per-(head dim, dtype) launchers.
#include "aux_kernels.h"
#include "build_config.h"
#include "bwd_aux_kernels.h"
#include "bwd_launch.h"
#include "cuda_check.h"
#include "device_faults.h"
#include "device_scope.h"
#include "fwd_args.h"
#include "forward.h"
#include "fwd_launch.h"
#include "inference.h"
#include "tile_dim_dispatch.h"
#include "kernels/bwd_tile_config.h"
#if FLASHATTN_CUDA_BWD_TIMELINE
#include "kernels/bwd_timeline.cuh"
#endif

#include "core/backend.h"
#include "core/error.h"
#include "core/problem.h"

#include <flashattn/philox.h>

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace flashattn::cuda {
namespace {

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

#if FLASHATTN_CUDA_HAS_SM90
// A kernel choice the environment may force ($name = sm80 or sm90; read per call, so that tests and
// benchmarks switch it in one process: a getenv, no allocation): true for sm90, false for sm80,
// `by_default` otherwise.
bool sm90_unless_forced(const char* name, bool by_default) {
    if (const char* choice = std::getenv(name)) {
        if (std::strcmp(choice, "sm80") == 0) return false;
        if (std::strcmp(choice, "sm90") == 0) return true;
    }
    return by_default;
}
#endif

// Which forward kernel runs on compute capability 9.0: the Hopper kernel (wgmma, warp-specialised;
// kernels/fwd_kernel_sm90.cuh), which measured 1.03-1.91x torch's FA2 on the H200 from 1k keys on
// where the mma.sync kernel measured 0.94-1.21x (bench/results/, docs/perf-log.md, session 4);
// except at d <= 64 with at most 512 keys, where the mma.sync kernel measured 5-10% faster (its
// 128-row CTAs are two per SM; the Hopper kernel's one CTA per SM has little to overlap its
// prologue and epilogue with). FLASHATTN_CUDA_FWD_KERNEL=sm80 / sm90 forces one (tests and
// benchmarks run both).
bool use_sm90_kernel(int major, int minor, int tile_dim, const FwdArgs& args) {
#if FLASHATTN_CUDA_HAS_SM90
    if (major != 9 || minor != 0) return false;
    return sm90_unless_forced("FLASHATTN_CUDA_FWD_KERNEL", !(tile_dim <= 64 && args.seqlen_k <= 512));
#else
    (void)major;
    (void)minor;
    (void)tile_dim;
    (void)args;
    return false;
#endif
}

template <fa_dtype kDtype>
void run_forward_kernel(int tile_dim, bool sm90, const FwdArgs& args, cudaStream_t stream) {
    with_tile_dim(tile_dim, "forward", [&](auto d) {
        constexpr int kDim = decltype(d)::value;
#if FLASHATTN_CUDA_HAS_SM90
        if (sm90) return run_fwd_sm90<kDim, kDtype>(args, stream);
#else
        (void)sm90;
#endif
        run_fwd<kDim, kDtype>(args, stream);
    });
}

int64_t round_up8(int64_t x) { return (x + 7) / 8 * 8; }

struct ComputeCapability {
    int major, minor;
};

// The device's compute capability, after refusing a device or problem the kernels cannot run (the
// forward and the backward check the same things).
ComputeCapability require_supported(int device, const fa_fwd_params& p) {
    ComputeCapability cc{0, 0};
    check_cuda(cudaDeviceGetAttribute(&cc.major, cudaDevAttrComputeCapabilityMajor, device), "querying the device");
    check_cuda(cudaDeviceGetAttribute(&cc.minor, cudaDevAttrComputeCapabilityMinor, device), "querying the device");
    if (cc.major < 8)
        fail(FA_ERROR_UNSUPPORTED, "the CUDA backend needs compute capability 8.0 or newer; device ", device, " is ",
             cc.major, ".", cc.minor);
    // Row indices inside the kernels are 32-bit (offsets are 64-bit); keep a block's worth of headroom.
    if (p.seqlen_q > INT_MAX - 256 || p.seqlen_k > INT_MAX - 256)
        fail(FA_ERROR_UNSUPPORTED, "seqlen_q/seqlen_k above 2^31-257 are not supported by the CUDA backend");
    return cc;
}

// The kernel-side view of a validated Problem (shared by the forward and the backward).
FwdArgs fwd_args_from(const Problem& problem) {
    const fa_fwd_params& p = problem.p;
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
    args.rng_state = p.rng_state;
    return args;
}

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

// kvcache_forward: kvcache.cu; combine: combine.cu; the inference path of forward: inference.cu.

FwdPlan plan_forward(const Problem& problem, int device) {
    const fa_fwd_params& p = problem.p;
    require(p.dtype == FA_FLOAT16 || p.dtype == FA_BFLOAT16, "dtype must be FA_FLOAT16 or FA_BFLOAT16 on CUDA");
    FwdPlan plan;
    if (problem.total_q == 0) return plan;
    plan.device = device;
    {
        DeviceGuard guard(device);
        const ComputeCapability cc = require_supported(device, p);
        plan.cc_major = cc.major;
        plan.cc_minor = cc.minor;
    }
    const bool varlen = problem.varlen;
    plan.dense_batch = varlen ? 1 : p.batch;
    plan.q_rows = varlen ? problem.total_q : p.seqlen_q;
    const bool paged = problem.kv.paged();
    plan.kv_batch = paged ? p.num_blocks : problem.kv.cache_entries ? problem.kv.cache_entries : plan.dense_batch;
    plan.k_rows = paged ? p.page_size : varlen ? p.total_k : p.seqlen_k;
    plan.kv_has_batch = paged || !varlen;
    plan.pad_head_dim = p.head_dim % 8 != 0;
    plan.padded_dim = int(round_up8(p.head_dim));
    plan.stage_q = plan.pad_head_dim || !chunk_aligned(p.q, varlen);
    plan.stage_k = plan.k_rows > 0 && (plan.pad_head_dim || !chunk_aligned(p.k, !plan.kv_has_batch));
    plan.stage_v = plan.k_rows > 0 && (plan.pad_head_dim || !chunk_aligned(p.v, !plan.kv_has_batch));
    plan.stage_out = plan.pad_head_dim || !chunk_aligned(p.out, varlen);
    const auto bytes = [&](int64_t batch, int64_t rows, int64_t heads) {
        return size_t(batch * rows * heads * plan.padded_dim * 2);
    };
    plan.q_bytes = plan.stage_q ? bytes(plan.dense_batch, plan.q_rows, p.num_heads) : 0;
    plan.k_bytes = plan.stage_k ? bytes(plan.kv_batch, plan.k_rows, p.num_heads_k) : 0;
    plan.v_bytes = plan.stage_v ? bytes(plan.kv_batch, plan.k_rows, p.num_heads_k) : 0;
    plan.out_bytes = plan.stage_out ? bytes(plan.dense_batch, plan.q_rows, p.num_heads) : 0;
    plan.lse_bytes = p.attn_probs && !p.softmax_lse ? size_t(p.num_heads) * problem.total_q * 4 : 0;
    const int head_dim = plan.pad_head_dim ? plan.padded_dim : p.head_dim;
    plan.tile_dim = tile_head_dim(head_dim);
    plan.inference = plan_inference(problem, head_dim, plan.tile_dim, plan.device);
    return plan;
}

namespace {

// The device of a plain forward: q's (-1 with no query row, when q may have no address).
int forward_device(const Problem& problem) {
    const int device = device_of(problem.p.q.data);
    require(device >= 0 || problem.total_q == 0, "q.data is not CUDA device memory");
    return device;
}

} // namespace

size_t fwd_workspace_size(const Problem& problem) { return plan_forward(problem, forward_device(problem)).bytes(); }

void forward(const Problem& problem, void* workspace_base, size_t workspace_size) {
    const int device = forward_device(problem);
    if (workspace_base && problem.total_q > 0) {
        require_on_device(workspace_base, device, "workspace");
        require_workspace_aligned(workspace_base);
    }
    const FwdPlan plan = plan_forward(problem, device);
    Workspace workspace(workspace_base, workspace_size, static_cast<cudaStream_t>(problem.p.stream),
                        "fa_forward_workspace_size");
    workspace.require_at_least(plan.bytes());
    forward(problem, plan, workspace);
}

void forward(const Problem& problem, const FwdPlan& plan, Workspace& workspace) {
    const fa_fwd_params& p = problem.p;
    if (plan.device < 0) return; // no query row: nothing to compute or write
    const int device = plan.device;
    require_on_device(p.q.data, device, "q.data");
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

    const auto stream = static_cast<cudaStream_t>(p.stream);
    const bool varlen = problem.varlen;

    FwdArgs args = fwd_args_from(problem);
    args.fault = device_fault_record(device);

    // Layouts the kernel cannot address in 16-byte chunks go through packed, zero-padded copies.
    const int padded_dim = plan.padded_dim;
    auto packed_view = [&](void* data, int64_t rows) {
        return fa_tensor{data, rows * p.num_heads * padded_dim, int64_t(p.num_heads) * padded_dim, padded_dim};
    };
    auto stage_input = [&](fa_tensor& t, int64_t batch, bool has_batch, int64_t rows, int64_t heads, void* buffer) {
        StridedView src{t.data, has_batch ? t.batch_stride : 0, t.row_stride, t.head_stride};
        pack_padded(src, buffer, batch, rows, heads, p.head_dim, padded_dim, stream);
        t = fa_tensor{buffer, rows * heads * padded_dim, heads * padded_dim, padded_dim};
    };
    void* const q_buffer = workspace.take(plan.q_bytes);
    void* const k_buffer = workspace.take(plan.k_bytes);
    void* const v_buffer = workspace.take(plan.v_bytes);
    void* const out_buffer = workspace.take(plan.out_bytes);
    if (plan.stage_q) stage_input(args.q, plan.dense_batch, !varlen, plan.q_rows, p.num_heads, q_buffer);
    if (plan.stage_k) stage_input(args.k, plan.kv_batch, plan.kv_has_batch, plan.k_rows, p.num_heads_k, k_buffer);
    if (plan.stage_v) stage_input(args.v, plan.kv_batch, plan.kv_has_batch, plan.k_rows, p.num_heads_k, v_buffer);
    if (plan.stage_out) args.out = packed_view(out_buffer, plan.q_rows);
    if (plan.pad_head_dim) args.head_dim = padded_dim; // the padding columns are zero in q and k: scores unchanged

    // attn_probs is derived from the lse, so it needs one even when the caller did not ask.
    if (plan.lse_bytes) args.lse = static_cast<float*>(workspace.take(plan.lse_bytes));

    const int tile_dim = plan.tile_dim;
    if (plan.inference.runs) {
        // paged K/V, a KV cache, split-KV: the SM80 kernel's inference variant (inference.cu)
        run_inference_forward(problem, plan.inference, args, tile_dim, workspace, stream);
    } else
#ifdef FLASHATTN_CUDA_TUNING
    if (!run_fwd_tile_variant(args, p.dtype, tile_dim, stream))
#endif
    {
        const bool sm90 = use_sm90_kernel(plan.cc_major, plan.cc_minor, tile_dim, args);
        if (p.dtype == FA_FLOAT16) {
            run_forward_kernel<FA_FLOAT16>(tile_dim, sm90, args, stream);
        } else {
            run_forward_kernel<FA_BFLOAT16>(tile_dim, sm90, args, stream);
        }
    }

    if (plan.stage_out) {
        StridedView dst{p.out.data, varlen ? 0 : p.out.batch_stride, p.out.row_stride, p.out.head_stride};
        unpack_padded(out_buffer, dst, plan.dense_batch, plan.q_rows, p.num_heads, p.head_dim, padded_dim, stream);
    }
    if (p.attn_probs) write_attn_probs(args, p.dtype, p.attn_probs, stream);
}

// ---------------------------------------------------------------------------------------------
// The backward: dsum, the main kernel, the finishing sums (bwd_launch.h, bwd_aux_kernels.h).
namespace {

#if FLASHATTN_CUDA_BWD_TIMELINE
// Measuring builds (CMake FLASHATTN_CUDA_BWD_TIMELINE=ON) only: with $FLASHATTN_CUDA_BWD_TIMELINE_FILE
// set, the Hopper backward records per-CTA event times (kernels/bwd_timeline.cuh) into a buffer
// allocated here, written to that file as CSV after the call (the stream is synchronised: not for
// production). bench/bwd_timeline.py reads it.
class BwdTimeline {
public:
    BwdTimeline(BwdArgs& args, int64_t ctas, cudaStream_t stream) : stream_(stream), ctas_(ctas) {
        const char* path = std::getenv("FLASHATTN_CUDA_BWD_TIMELINE_FILE");
        if (path == nullptr || *path == '\0' || ctas <= 0) return;
        path_ = path;
        check_cuda(cudaMalloc(&buffer_, bytes()), "allocating the backward timeline");
        check_cuda(cudaMemsetAsync(buffer_, 0, bytes(), stream), "clearing the backward timeline");
        args.timeline = buffer_;
    }
    BwdTimeline(const BwdTimeline&) = delete;
    BwdTimeline& operator=(const BwdTimeline&) = delete;
    ~BwdTimeline() {
        if (buffer_) (void)cudaFree(buffer_);
    }
    void write() const {
        if (buffer_ == nullptr) return;
        std::vector<uint64_t> host(size_t(ctas_) * kernels::kBwdTimelineSlots);
        check_cuda(cudaMemcpyAsync(host.data(), buffer_, bytes(), cudaMemcpyDeviceToHost, stream_),
                   "reading the backward timeline");
        check_cuda(cudaStreamSynchronize(stream_), "reading the backward timeline");
        std::FILE* file = std::fopen(path_.c_str(), "w");
        if (file == nullptr) fail(FA_ERROR_INVALID_ARGUMENT, "FLASHATTN_CUDA_BWD_TIMELINE_FILE: cannot write ", path_);
        std::fprintf(file, "cta,smid,global_start_ns,global_end_ns,start,kv_ready,first_scores,blocks_done,"
                           "epilogue_done,producer_start,producer_kv_issued,producer_issued,producer_exit\n");
        for (int64_t c = 0; c < ctas_; ++c) {
            std::fprintf(file, "%lld", static_cast<long long>(c));
            for (int slot = 0; slot < kernels::kBwdTimelineSlots; ++slot)
                std::fprintf(file, ",%llu", static_cast<unsigned long long>(host[size_t(c) * kernels::kBwdTimelineSlots + slot]));
            std::fprintf(file, "\n");
        }
        std::fclose(file);
    }

private:
    size_t bytes() const { return size_t(ctas_) * kernels::kBwdTimelineSlots * sizeof(uint64_t); }
    cudaStream_t stream_;
    int64_t ctas_;
    std::string path_;
    uint64_t* buffer_ = nullptr;
};
#endif

// Which backward main kernel runs on compute capability 9.0: the Hopper kernel (wgmma,
// warp-specialised; kernels/bwd_kernel_sm90.cuh at d64/d128, kernels/bwd_kernel_sm90_pds.cuh at
// d256) for the tile head dims it has (kernels::sm90_bwd_supports: 64, 128, 256) without dropout
// (its registers hold query pairs, the Philox words come in key pairs), where it measured faster
// than the mma.sync kernel on the H200 (session 6, run 2): at d64 and d256 everywhere (d256
// 1.1-1.6x from 512 queries; causal 512 even), at d128 from 512 queries (session 7 run 6, once its
// producer stopped spilling: 512 1.32x the mma.sync kernel, causal 1.26x; shorter not measured);
// but not for d256 in deterministic mode, where its CTAs walk several key blocks each and it
// measured 0.71-0.85x the mma.sync kernel (session 6 run 4, before the producer fix: 16k 150 vs 176).
// The mma.sync kernel everywhere else.
// $FLASHATTN_CUDA_BWD_KERNEL=sm80 / sm90 (read per call, so benchmarks time both in one process)
// forces one where both can run.
bool use_sm90_backward(int major, int minor, int tile_dim, const BwdArgs& args) {
#if FLASHATTN_CUDA_HAS_SM90
    if (major != 9 || minor != 0) return false;
    if (!kernels::sm90_bwd_supports(tile_dim) || args.fwd.dropout) return false;
    const bool deterministic = args.dq_chunk_stride != 0;
    const bool by_default = tile_dim == 64 || (tile_dim == 128 && args.fwd.seqlen_q >= 512) ||
                            (tile_dim == 256 && !deterministic);
    return sm90_unless_forced("FLASHATTN_CUDA_BWD_KERNEL", by_default);
#else
    (void)major;
    (void)minor;
    (void)tile_dim;
    (void)args;
    return false;
#endif
}

template <fa_dtype kDtype>
void run_backward_kernel(int tile_dim, bool sm90, const BwdArgs& args, cudaStream_t stream) {
#ifdef FLASHATTN_CUDA_TUNING
    if (!sm90 && run_bwd_tile_variant(args, kDtype, tile_dim, stream)) return;
#endif
    with_tile_dim(tile_dim, "backward", [&](auto d) {
        constexpr int kDim = decltype(d)::value;
#if FLASHATTN_CUDA_HAS_SM90
        if constexpr (kernels::sm90_bwd_supports(kDim)) {
            if (sm90) return run_bwd_sm90<kDim, kDtype>(args, stream);
        }
#else
        (void)sm90;
#endif
        run_bwd<kDim, kDtype>(args, stream);
    });
}

// The device of a backward call: where q lives, or (no query rows) where the key side lives.
int backward_device(const BwdProblem& problem) {
    const fa_fwd_params& p = problem.fwd.p;
    for (const void* ptr : {p.q.data, p.k.data, p.v.data, problem.p.dout.data, problem.p.dq.data, problem.p.dk.data,
                            problem.p.dv.data}) {
        const int device = device_of(ptr);
        if (device >= 0) return device;
    }
    return -1;
}

// Everything the backward allocates, decided once from the problem and the device, so that
// fa_bwd_workspace_size and the call agree. One workspace (the caller's, or stream-ordered scratch)
// holds, 256-byte aligned: dsum, the fp32 dQ scratch (one buffer per chunk when deterministic),
// the per-query-head fp32 dK/dV scratch when needed, and packed copies of q, k, v, dout when the
// kernel cannot read them in place.
struct BwdPlan {
    int device = -1;
    int tile_dim = 0, padded_dim = 0;
    bool pad_head_dim = false;
    bool stage_q = false, stage_k = false, stage_v = false, stage_dout = false;
    bool dkv_scratch = false;    // dK/dV go through fp32 per query head (GQA, odd dk/dv layouts)
    int num_chunks = 0;          // key-block chunks per (sequence, head); 0 = one per key block
    int64_t dq_chunk_stride = 0; // deterministic only
    int64_t q_rows_total = 0, k_rows_total = 0;
    size_t dsum_at = 0, dq_at = 0, dq_bytes = 0, dk_at = 0, dv_at = 0, q_at = 0, k_at = 0, v_at = 0, dout_at = 0;
    size_t bytes = 0;
};

// Deterministic dQ scratch is bounded: fewer chunks (less parallelism) beyond this.
// 512 MB measured too tight on the H200: at 16k tokens, d256 with 8 heads it allowed 3 chunks
// (24 CTAs on 132 SMs; 46 TFLOP/s against 187 non-deterministic). 4 GB fills the device at the
// benchmark shapes; it is a fixed bound (not free memory) so that fa_bwd_workspace_size and the
// call agree.
constexpr size_t kMaxDeterministicDqBytes = size_t(4) << 30;

BwdPlan plan_backward(const BwdProblem& problem) {
    const Problem& pr = problem.fwd;
    const fa_fwd_params& p = pr.p;
    const bool varlen = pr.varlen;
    BwdPlan plan;
    plan.device = backward_device(problem);
    plan.pad_head_dim = p.head_dim % 8 != 0;
    plan.padded_dim = int(round_up8(p.head_dim));
    plan.tile_dim = tile_head_dim(plan.padded_dim);
    plan.q_rows_total = varlen ? pr.total_q : int64_t(p.batch) * p.seqlen_q;
    plan.k_rows_total = varlen ? p.total_k : int64_t(p.batch) * p.seqlen_k;
    const int64_t q_rows = varlen ? pr.total_q : p.seqlen_q; // per batch entry of the tensors
    const int64_t k_rows = varlen ? p.total_k : p.seqlen_k;
    plan.stage_q = q_rows > 0 && (plan.pad_head_dim || !chunk_aligned(p.q, varlen));
    plan.stage_dout = q_rows > 0 && (plan.pad_head_dim || !chunk_aligned(problem.p.dout, varlen));
    plan.stage_k = k_rows > 0 && (plan.pad_head_dim || !chunk_aligned(p.k, varlen));
    plan.stage_v = k_rows > 0 && (plan.pad_head_dim || !chunk_aligned(p.v, varlen));
    plan.dkv_scratch = pr.group > 1 || plan.pad_head_dim || !chunk_aligned(problem.p.dk, varlen) ||
                       !chunk_aligned(problem.p.dv, varlen);

    const size_t dq_buffer = size_t(p.num_heads) * plan.q_rows_total * plan.tile_dim * sizeof(float);
    size_t chunks = 1;
    if (problem.p.deterministic) {
        // (sequence, head, chunk) CTAs that fill the device in one wave, within the memory bound:
        // rounding up gave 1.2-1.5 waves (d64 16k: 5 chunks x 32 heads = 160 CTAs on 132 SMs, 150
        // TFLOP/s against 237 with 3 chunks; docs/perf-log.md, session 3), so round down.
        const int block_n = kernels::bwd_block_n(plan.tile_dim);
        const int64_t n_blocks = (int64_t(p.seqlen_k) + block_n - 1) / block_n;
        int sms = 132;
        if (plan.device >= 0)
            check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, plan.device), "querying the device");
        const int64_t items = std::max<int64_t>(1, int64_t(p.batch) * p.num_heads);
        chunks = size_t(std::clamp<int64_t>(sms / items, 1, std::max<int64_t>(n_blocks, 1)));
        while (chunks > 1 && chunks * dq_buffer > kMaxDeterministicDqBytes) --chunks;
        plan.num_chunks = int(chunks);
        plan.dq_chunk_stride = int64_t(dq_buffer / sizeof(float));
    }

    const auto staged = [&](int64_t rows, int64_t heads) {
        return size_t((varlen ? 1 : p.batch) * rows * heads * plan.padded_dim * 2);
    };
    size_t at = 0;
    const auto take = [&](size_t bytes) {
        const size_t start = at;
        at += (bytes + 255) / 256 * 256;
        return start;
    };
    plan.dsum_at = take(size_t(p.num_heads) * plan.q_rows_total * sizeof(float));
    plan.dq_bytes = chunks * dq_buffer;
    plan.dq_at = take(plan.dq_bytes);
    const size_t dkv_bytes = plan.dkv_scratch ? size_t(p.num_heads) * plan.k_rows_total * plan.tile_dim * 4 : 0;
    plan.dk_at = take(dkv_bytes);
    plan.dv_at = take(dkv_bytes);
    plan.q_at = take(plan.stage_q ? staged(q_rows, p.num_heads) : 0);
    plan.dout_at = take(plan.stage_dout ? staged(q_rows, p.num_heads) : 0);
    plan.k_at = take(plan.stage_k ? staged(k_rows, p.num_heads_k) : 0);
    plan.v_at = take(plan.stage_v ? staged(k_rows, p.num_heads_k) : 0);
    plan.bytes = at;
    return plan;
}

} // namespace

void backward(const BwdProblem& problem) {
    const Problem& pr = problem.fwd;
    const fa_fwd_params& p = pr.p;
    const fa_bwd_params& bp = problem.p;
    require(p.dtype == FA_FLOAT16 || p.dtype == FA_BFLOAT16, "dtype must be FA_FLOAT16 or FA_BFLOAT16 on CUDA");
    const BwdPlan plan = plan_backward(problem);
    const int device = plan.device;
    if (device < 0) return; // no tensor has a row: nothing to compute or write
    for (const auto& [ptr, name] : {std::pair<const void*, const char*>{p.q.data, "q.data"}, {p.k.data, "k.data"},
                                    {p.v.data, "v.data"}, {p.out.data, "out.data"}, {p.softmax_lse, "softmax_lse"},
                                    {p.cu_seqlens_q, "cu_seqlens_q"}, {p.cu_seqlens_k, "cu_seqlens_k"},
                                    {p.seqused_k, "seqused_k"}, {p.alibi_slopes, "alibi_slopes"},
                                    {bp.dout.data, "dout.data"}, {bp.dq.data, "dq.data"}, {bp.dk.data, "dk.data"},
                                    {bp.dv.data, "dv.data"}, {bp.workspace, "workspace"}})
        require_on_device(ptr, device, name);

    DeviceGuard guard(device);
    const auto [major, minor] = require_supported(device, p);
    const auto stream = static_cast<cudaStream_t>(p.stream);
    const bool varlen = pr.varlen;

    // The workspace: the caller's (fa_bwd_workspace_size bytes), else stream-ordered scratch.
    if (bp.workspace) {
        require(bp.workspace_size >= plan.bytes, "workspace_size is ", bp.workspace_size,
                " bytes but this backward needs ", plan.bytes, " (ask fa_bwd_workspace_size)");
        require_workspace_aligned(bp.workspace);
    }
    StreamBuffer scratch(bp.workspace ? 0 : plan.bytes, stream);
    char* const ws = static_cast<char*>(bp.workspace ? bp.workspace : scratch.get());
    const auto ws_float = [&](size_t at) { return reinterpret_cast<float*>(ws + at); };

    BwdArgs args{};
    args.fwd = fwd_args_from(pr);
    args.fwd.fault = device_fault_record(device);
    args.dout = bp.dout;
    args.dq = bp.dq;
    args.dk = bp.dk;
    args.dv = bp.dv;
    args.num_heads_k = p.num_heads_k;
    args.out_head_dim = p.head_dim;
    args.accum_cols = plan.tile_dim;
    args.dsum = ws_float(plan.dsum_at);
    args.dq_accum = ws_float(plan.dq_at);
    args.dq_chunk_stride = plan.dq_chunk_stride;
    args.num_chunks = plan.num_chunks;
    args.dk_accum = plan.dkv_scratch ? ws_float(plan.dk_at) : nullptr;
    args.dv_accum = plan.dkv_scratch ? ws_float(plan.dv_at) : nullptr;
    args.q_rows_total = plan.q_rows_total;
    args.k_rows_total = plan.k_rows_total;
    args.dq_scale = pr.scale;
    args.dk_scale = pr.scale;
    args.dv_scale = args.fwd.keep_rescale;

    // Inputs the kernel cannot read in 16-byte chunks go through packed, zero-padded copies.
    const int64_t dense_batch = varlen ? 1 : p.batch;
    const int64_t q_rows = varlen ? pr.total_q : p.seqlen_q;
    const int64_t k_rows = varlen ? p.total_k : p.seqlen_k;
    auto stage_input = [&](fa_tensor& t, int64_t rows, int64_t heads, size_t at) {
        StridedView src{t.data, varlen ? 0 : t.batch_stride, t.row_stride, t.head_stride};
        pack_padded(src, ws + at, dense_batch, rows, heads, p.head_dim, plan.padded_dim, stream);
        t = fa_tensor{ws + at, rows * heads * plan.padded_dim, heads * plan.padded_dim, plan.padded_dim};
    };
    if (plan.stage_q) stage_input(args.fwd.q, q_rows, p.num_heads, plan.q_at);
    if (plan.stage_dout) stage_input(args.dout, q_rows, p.num_heads, plan.dout_at);
    if (plan.stage_k) stage_input(args.fwd.k, k_rows, p.num_heads_k, plan.k_at);
    if (plan.stage_v) stage_input(args.fwd.v, k_rows, p.num_heads_k, plan.v_at);
    if (plan.pad_head_dim) args.fwd.head_dim = plan.padded_dim; // padding columns are zero: products unchanged

    bwd_dsum(args, p.dtype, stream); // also zeroes the dQ scratch rows the main kernel adds to
    const bool sm90 = use_sm90_backward(major, minor, plan.tile_dim, args);
#if FLASHATTN_CUDA_BWD_TIMELINE
    BwdArgs grid_args = args; // the launcher's grid, planned on a copy (plan_bwd_grid fills it in)
    const BwdTimeline timeline(
        args, sm90 ? plan_bwd_grid(grid_args, plan.tile_dim, kernels::bwd_block_n(plan.tile_dim)) : 0, stream);
#endif
    if (p.dtype == FA_FLOAT16) {
        run_backward_kernel<FA_FLOAT16>(plan.tile_dim, sm90, args, stream);
    } else {
        run_backward_kernel<FA_BFLOAT16>(plan.tile_dim, sm90, args, stream);
    }
#if FLASHATTN_CUDA_BWD_TIMELINE
    timeline.write();
#endif
    bwd_finish(args, p.dtype, stream);
}

size_t bwd_workspace_size(const BwdProblem& problem) {
    const BwdPlan plan = plan_backward(problem);
    return plan.device < 0 ? 0 : plan.bytes;
}

} // namespace flashattn::cuda
