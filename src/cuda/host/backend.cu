// The CUDA backend's entry points (core/backend.h). Each call: find the device of the tensors, plan
// it (host/planner.h: kernel, grid, splits, scratch), check that every tensor lives on that device,
// take the scratch (Workspace), stage the layouts the kernels cannot read in 16-byte chunks, and run
// the planned kernels on the caller's stream. Nothing here decides a kernel or a size: the plan does.
#include "host/run.h"

#include "build_config.h"
#include "host/cuda_check.h"
#include "host/device_info.h"
#include "host/device_scope.h"
#include "host/launch.h"
#include "host/tile_dim_dispatch.h"
#include "kernels/aux/aux_kernels.h"
#include "kernels/aux/bwd_aux_kernels.h"
#include "kernels/aux/combine.h"
#include "kernels/tiles.h"

#include "core/backend.h"
#include "core/error.h"
#include "core/overrides.h"
#include "core/problem.h"

#include <flashattn/philox.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

namespace flashattn::cuda {
namespace {

// The kernels' view of a validated problem (shared by the forward and the backward).
FwdArgs fwd_args_from(const Problem& problem, DeviceFault* fault) {
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
    args.head_dim_v = int32_t(problem.head_dim_v());
    args.seqlen_q = p.seqlen_q;
    args.seqlen_k = p.seqlen_k;
    args.cu_seqlens_q = varlen ? p.cu_seqlens_q : nullptr;
    args.cu_seqlens_k = varlen ? p.cu_seqlens_k : nullptr;
    args.seqused_k = p.seqused_k;
    args.total_q = problem.total_q;
    args.total_k = varlen ? p.total_k : int64_t(p.batch) * p.seqlen_k;
    args.fault = fault;
    args.scale = problem.scale;
    args.scale_log2 = problem.scale_log2;
    args.softcap = p.softcap;
    args.mask = problem.mask;
    args.alibi_slopes = p.alibi_slopes;
    args.alibi_batch_stride = p.alibi_batch_stride;
    // Raw Q.K^T can feed the softmax (scale folded into exp2) unless something transforms the
    // scores, or a non-positive scale would turn the row max into a row min.
    args.transform_scores = p.softcap > 0.0f || p.alibi_slopes != nullptr || !(problem.scale > 0.0f);
    args.learnable_sink = p.learnable_sink;
    args.dropout = problem.has_dropout();
    args.keep_threshold = dropout_keep_threshold(p.dropout_p);
    args.keep_rescale = args.dropout ? float(1.0 / (1.0 - double(p.dropout_p))) : 1.0f;
    args.rng_seed = p.rng_seed;
    args.rng_offset = p.rng_offset;
    args.rng_state = p.rng_state;
    args.num_splits = 1;
    return args;
}

// t replaced by its packed, zero-padded copy in `buffer`: (batch, rows, heads, padded_dim).
void stage_input(fa_tensor& t, int64_t batch, bool has_batch, int64_t rows, int64_t heads, int head_dim,
                 int padded_dim, void* buffer, cudaStream_t stream) {
    StridedView src{t.data, has_batch ? t.batch_stride : 0, t.row_stride, t.head_stride};
    pack_padded(src, buffer, batch, rows, heads, head_dim, padded_dim, stream);
    t = fa_tensor{buffer, rows * heads * padded_dim, heads * padded_dim, padded_dim};
}

template <typename Fn>
void with_dtype(fa_dtype dtype, Fn&& fn) {
    if (dtype == FA_FLOAT16) {
        fn(std::integral_constant<fa_dtype, FA_FLOAT16>{});
    } else {
        fn(std::integral_constant<fa_dtype, FA_BFLOAT16>{});
    }
}

void launch_forward(const ForwardPlan& plan, const FwdArgs& args, fa_dtype dtype, cudaStream_t stream) {
    with_tile_dim(plan.tile_dim, "forward", [&](auto d) {
        with_dtype(dtype, [&](auto t) {
            constexpr int kDim = decltype(d)::value;
            constexpr fa_dtype kDtype = decltype(t)::value;
            switch (plan.kernel) {
                case Kernel::forward_sm90:
#if FLASHATTN_CUDA_HAS_SM90
                    // V and O at their own width where the plan took a value-dim instance.
                    if constexpr (constexpr int kDimV = tiles::forward_sm90_value_dim(kDim); kDimV != 0) {
                        if (plan.tile_dim_v == kDimV) return run_forward_sm90<kDim, kDtype, kDimV>(args, plan.ctas, stream);
                    }
                    if (plan.tile_dim_v != kDim)
                        fail(FA_ERROR_INTERNAL, "no sm90 forward of value head dim ", plan.tile_dim_v, " at ", kDim);
                    if (plan.block_m != tiles::forward_sm90(kDim).block_m)
                        fail(FA_ERROR_INTERNAL, "no sm90 forward of ", plan.block_m, " rows at ", kDim);
                    return run_forward_sm90<kDim, kDtype>(args, plan.ctas, stream);
#else
                    fail(FA_ERROR_INTERNAL, "the plan chose the sm90 forward in a build without it");
#endif
                case Kernel::inference: return run_inference<kDim, kDtype>(args, plan.ctas, stream);
                case Kernel::decode: return run_decode<kDim, kDtype>(args, plan.ctas, plan.decode_loads, stream);
                default: return run_forward_sm80<kDim, kDtype>(args, plan.ctas, stream);
            }
        });
    });
}

void launch_backward(const BackwardPlan& plan, const BwdArgs& args, fa_dtype dtype, cudaStream_t stream) {
    with_tile_dim(plan.tile_dim, "backward", [&](auto d) {
        with_dtype(dtype, [&](auto t) {
            constexpr int kDim = decltype(d)::value;
            constexpr fa_dtype kDtype = decltype(t)::value;
#if FLASHATTN_CUDA_HAS_SM90
            // V, dO and dV at their own width where the plan took a value-dim instance.
            if constexpr (constexpr int kDimV = tiles::backward_sm90_value_dim(kDim); kDimV != 0) {
                if (plan.kernel == Kernel::backward_sm90 && plan.tile_dim_v == kDimV)
                    return run_backward_sm90<kDim, kDtype, kDimV>(args, plan.ctas, stream);
            }
#endif
            if (plan.tile_dim_v != kDim)
                fail(FA_ERROR_INTERNAL, "no backward of value head dim ", plan.tile_dim_v, " at ", kDim);
#if FLASHATTN_CUDA_HAS_SM90
            if constexpr (tiles::backward_sm90_has(kDim)) {
                if (plan.kernel == Kernel::backward_sm90) return run_backward_sm90<kDim, kDtype>(args, plan.ctas, stream);
            }
#endif
            if (plan.kernel == Kernel::backward_sm90)
                fail(FA_ERROR_INTERNAL, "the plan chose the sm90 backward where this build has none");
            run_backward_sm80<kDim, kDtype>(args, plan.ctas, stream);
        });
    });
}

// Split-KV's last step: the partials (split, batch, seqlen_q, heads, d) and their lse merged into
// out and softmax_lse (kernels/aux/combine.cu).
void combine_splits(const fa_fwd_params& p, const FwdArgs& args, const ForwardPlan& plan, cudaStream_t stream) {
    const int64_t d = args.head_dim, heads = p.num_heads, sq = p.seqlen_q;
    CombineArgs c{};
    c.num_splits = plan.splits;
    c.batch = p.batch;
    c.rows = sq;
    c.heads = heads;
    c.head_dim = int32_t(d);
    c.partial = args.out_accum;
    c.partial_split_stride = p.batch * sq * heads * d;
    c.partial_batch_stride = sq * heads * d;
    c.partial_row_stride = heads * d;
    c.partial_head_stride = d;
    c.lse_partial = args.lse_accum;
    c.lse_split_stride = p.batch * heads * sq;
    c.lse_batch_stride = heads * sq;
    c.lse_head_stride = sq;
    c.lse_row_stride = 1;
    c.out = args.out.data;
    c.out_dtype = p.dtype;
    c.out_batch_stride = args.out.batch_stride;
    c.out_row_stride = args.out.row_stride;
    c.out_head_stride = args.out.head_stride;
    c.lse = args.lse; // (batch, heads, seqlen_q), or none
    c.lse_out_batch_stride = heads * sq;
    c.lse_out_head_stride = sq;
    c.lse_out_row_stride = 1;
    launch_combine(c, stream, plan.dependent_combine, /*every_split_allocated=*/true);
}

// The device of a plain forward: q's (-1 with no query row, when q may have no address).
int forward_device(const Problem& problem) {
    const int device = device_of(problem.p.q.data);
    require(device >= 0 || problem.total_q == 0, "q.data is not CUDA device memory");
    return device;
}

// The device of a backward call: where q lives, or (no query rows) where the key side lives.
int backward_device(const BwdProblem& problem) {
    const fa_fwd_params& p = problem.fwd.p;
    for (const void* ptr : {p.q.data, p.k.data, p.v.data, problem.p.dout.data, problem.p.dq.data, problem.p.dk.data,
                            problem.p.dv.data})
        if (const int device = device_of(ptr); device >= 0) return device;
    return -1;
}

// The arrays of a forward problem that the forward and the backward both read, on `device`.
void require_problem_on_device(const fa_fwd_params& p, int device) {
    for (const auto& [ptr, name] : {std::pair<const void*, const char*>{p.q.data, "q.data"}, {p.k.data, "k.data"},
                                    {p.v.data, "v.data"}, {p.out.data, "out.data"}, {p.softmax_lse, "softmax_lse"},
                                    {p.cu_seqlens_q, "cu_seqlens_q"}, {p.cu_seqlens_k, "cu_seqlens_k"},
                                    {p.seqused_k, "seqused_k"}, {p.alibi_slopes, "alibi_slopes"},
                                    {p.rng_state, "rng_state"}, {p.learnable_sink, "learnable_sink"}})
        require_on_device(ptr, device, name);
}

ForwardPlan forward_plan(const Problem& problem, int device) {
    if (device < 0) {
        ForwardPlan empty;
        empty.empty = true;
        return empty;
    }
    DeviceGuard guard(device);
    return plan_forward(problem, device_info(device), current_overrides());
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

void run_forward(const Problem& problem, const ForwardPlan& plan, const Workspace& workspace, int device) {
    const fa_fwd_params& p = problem.p;
    if (plan.empty) return;
    require_problem_on_device(p, device);
    for (const auto& [ptr, name] : {std::pair<const void*, const char*>{p.attn_probs, "attn_probs"},
                                    {problem.kv.block_table, "block_table"}, {problem.kv.cache_seqlens, "cache_seqlens"},
                                    {problem.kv.cache_batch_idx, "cache_batch_idx"},
                                    {problem.kv.cache_leftpad, "cache_leftpad"}})
        require_on_device(ptr, device, name);
    DeviceGuard guard(device);
    const auto stream = static_cast<cudaStream_t>(p.stream);
    FwdArgs args = fwd_args_from(problem, device_fault_record(device));

    // Layouts the kernels cannot address in 16-byte chunks, and widths other than the ones they run
    // at (a value head dim unlike the query's, except in the Hopper value-dim instances: the narrower
    // side), go through packed, zero-padded copies. A KV cache or a paged pool is copied whole
    // (planner.h, Staging).
    const Staging& s = plan.staging;
    if (s.q) stage_input(args.q, s.dense_batch, !problem.varlen, s.q_rows, p.num_heads, s.qk_dim, s.padded_dim,
                         workspace.at(Piece::q), stream);
    if (s.k) stage_input(args.k, s.kv_batch, s.kv_has_batch, s.k_rows, p.num_heads_k, s.qk_dim, s.padded_dim,
                         workspace.at(Piece::k), stream);
    if (s.v) stage_input(args.v, s.kv_batch, s.kv_has_batch, s.k_rows, p.num_heads_k, s.v_dim, s.padded_dim_v,
                         workspace.at(Piece::v), stream);
    if (s.out) {
        void* const buffer = workspace.at(Piece::out);
        args.out = fa_tensor{buffer, s.q_rows * p.num_heads * s.padded_dim_v, int64_t(p.num_heads) * s.padded_dim_v,
                             s.padded_dim_v};
    }
    args.head_dim = plan.head_dim; // padding columns are zero: the scores do not change, out's are 0
    args.head_dim_v = plan.head_dim_v;
    if (workspace.at(Piece::lse)) args.lse = workspace.floats(Piece::lse); // attn_probs derives from an lse

    args.num_m_blocks = plan.num_m_blocks;
    args.section_heads = plan.section_heads;
    if (plan.sm90_claims_tiles) {
        args.tile_counter = static_cast<unsigned*>(workspace.at(Piece::tile_counter));
        clear_for_dependent(args.tile_counter, 1, stream);
    }
    if (plan.kernel == Kernel::inference || plan.kernel == Kernel::decode) {
        const KvLayout& kv = problem.kv;
        args.block_table = kv.block_table;
        args.block_table_stride = kv.block_table_stride;
        args.page_size = int32_t(kv.page_size);
        args.num_blocks = int32_t(kv.num_blocks);
        args.cache_seqlens = kv.cache_seqlens;
        args.cache_batch_idx = kv.cache_batch_idx;
        args.cache_leftpad = kv.cache_leftpad;
        args.seqlen_new = int32_t(kv.seqlen_new);
        args.cache_entries = int32_t(kv.cache_entries);
        args.num_splits = plan.splits;
        args.pack_gqa = plan.pack_gqa;
        args.prefetch_pages = plan.prefetch_pages;
        args.out_accum = workspace.floats(Piece::partial_out);
        args.lse_accum = workspace.floats(Piece::partial_lse);
    }
    launch_forward(plan, args, p.dtype, stream);
    if (plan.splits > 1) combine_splits(p, args, plan, stream);

    if (s.out) {
        StridedView dst{p.out.data, problem.varlen ? 0 : p.out.batch_stride, p.out.row_stride, p.out.head_stride};
        unpack_padded(workspace.at(Piece::out), dst, s.dense_batch, s.q_rows, p.num_heads, s.v_dim, s.padded_dim_v,
                      stream);
    }
    if (p.attn_probs) write_attn_probs(args, p.dtype, p.attn_probs, stream);
}

size_t fwd_workspace_size(const Problem& problem) {
    return forward_plan(problem, forward_device(problem)).workspace.total;
}

void forward(const Problem& problem, void* workspace_base, size_t workspace_size) {
    const int device = forward_device(problem);
    const ForwardPlan plan = forward_plan(problem, device);
    if (plan.empty) return; // no query row: nothing to compute or write
    if (workspace_base) require_on_device(workspace_base, device, "workspace");
    DeviceGuard guard(device);
    const Workspace workspace(workspace_base, workspace_size, plan.workspace, static_cast<cudaStream_t>(problem.p.stream),
                              "fa_forward_workspace_size");
    run_forward(problem, plan, workspace, device);
}

// ---------------------------------------------------------------------------------------------
// The backward: dsum, the main kernel, the finishing sums (kernels/aux/bwd_aux_kernels.h).

size_t bwd_workspace_size(const BwdProblem& problem) {
    const int device = backward_device(problem);
    if (device < 0) return 0;
    DeviceGuard guard(device);
    return plan_backward(problem, device_info(device), current_overrides()).workspace.total;
}

void backward(const BwdProblem& problem) {
    const Problem& pr = problem.fwd;
    const fa_fwd_params& p = pr.p;
    const fa_bwd_params& bp = problem.p;
    require(p.dtype == FA_FLOAT16 || p.dtype == FA_BFLOAT16, "dtype must be FA_FLOAT16 or FA_BFLOAT16 on CUDA");
    const int device = backward_device(problem);
    if (device < 0) { // no tensor has a row: nothing to compute, only dsink to write (zeros)
        if (bp.dsink) {
            const int dsink_device = device_of(bp.dsink);
            require(dsink_device >= 0, "dsink is not CUDA device memory");
            DeviceGuard guard(dsink_device);
            check_cuda(cudaMemsetAsync(bp.dsink, 0, size_t(p.num_heads) * sizeof(float), static_cast<cudaStream_t>(p.stream)),
                       "zeroing dsink");
        }
        return;
    }
    require_problem_on_device(p, device);
    for (const auto& [ptr, name] : {std::pair<const void*, const char*>{bp.dout.data, "dout.data"}, {bp.dq.data, "dq.data"},
                                    {bp.dk.data, "dk.data"}, {bp.dv.data, "dv.data"}, {bp.workspace, "workspace"},
                                    {bp.dsink, "dsink"}})
        require_on_device(ptr, device, name);
    DeviceGuard guard(device);
    const BackwardPlan plan = plan_backward(problem, device_info(device), current_overrides());
    const auto stream = static_cast<cudaStream_t>(p.stream);
    const Workspace workspace(bp.workspace, bp.workspace_size, plan.workspace, stream, "fa_bwd_workspace_size");

    BwdArgs args{};
    args.fwd = fwd_args_from(pr, device_fault_record(device));
    args.dout = bp.dout;
    args.dq = bp.dq;
    args.dk = bp.dk;
    args.dv = bp.dv;
    args.num_heads_k = p.num_heads_k;
    args.qk_head_dim = p.head_dim;
    args.v_head_dim = p.head_dim_v;
    args.accum_cols = plan.tile_dim;
    args.dsum = workspace.floats(Piece::dsum);
    if (plan.kernel == Kernel::backward_sm90) { // (one +inf, then the rows)
        args.lse_log2_none = workspace.floats(Piece::lse_log2);
        args.lse_log2 = args.lse_log2_none + 1;
    }
    args.dq_accum = workspace.floats(Piece::dq_accum);
    args.dq_chunk_stride = plan.dq_chunk_stride;
    args.num_chunks = plan.num_chunks;
    args.num_n_blocks = plan.num_n_blocks;
    if (plan.ordered_dq) { // the counters are zeroed by the dsum pass, which runs first
        args.dq_semaphore = static_cast<int*>(workspace.at(Piece::dq_semaphore));
        args.dq_semaphore_blocks = plan.dq_semaphore_blocks;
        args.dq_semaphore_rows = plan.dq_semaphore_rows;
        args.dq_section_pairs = plan.dq_section_pairs;
        args.dq_keys_descending = plan.dq_keys_descending;
    }
    args.tail_pairs = plan.tail_pairs;
    args.group_heads = int32_t(plan.walk_heads);
    args.dk_accum = plan.dkv_scratch ? workspace.floats(Piece::dk_accum) : nullptr;
    args.dv_accum = plan.dkv_scratch ? workspace.floats(Piece::dv_accum) : nullptr;
    args.dkv_add = plan.dkv_add;
    args.dsink = bp.dsink;
    args.dsink_terms = plan.dsink_terms > 0 ? workspace.floats(Piece::dsink_partial) : nullptr;
    args.q_rows_total = plan.q_rows_total;
    args.k_rows_total = plan.k_rows_total;
    args.dq_scale = pr.scale;
    args.dk_scale = pr.scale;
    args.dv_scale = args.fwd.keep_rescale;

    // Inputs the kernels cannot read in 16-byte chunks, or of a width other than the one they run at,
    // go through packed, zero-padded copies (the outputs through the fp32 scratch: dkv_scratch).
    const Staging& s = plan.staging;
    const bool has_batch = !pr.varlen;
    if (s.q) stage_input(args.fwd.q, s.dense_batch, has_batch, s.q_rows, p.num_heads, s.qk_dim, s.padded_dim,
                         workspace.at(Piece::q), stream);
    if (s.dout) stage_input(args.dout, s.dense_batch, has_batch, s.q_rows, p.num_heads, s.v_dim, s.padded_dim_v,
                            workspace.at(Piece::dout), stream);
    if (s.k) stage_input(args.fwd.k, s.dense_batch, has_batch, s.k_rows, p.num_heads_k, s.qk_dim, s.padded_dim,
                         workspace.at(Piece::k), stream);
    if (s.v) stage_input(args.fwd.v, s.dense_batch, has_batch, s.k_rows, p.num_heads_k, s.v_dim, s.padded_dim_v,
                         workspace.at(Piece::v), stream);
    // Padding columns are zero: products unchanged, and the padded columns of dQ, dK, dV are 0.
    // (The value-dim instance reads v and dout at head_dim_v, nothing padded.)
    if (s.pad_head_dim) {
        args.fwd.head_dim = s.padded_dim;
        args.fwd.head_dim_v = s.padded_dim_v;
    }

    if (plan.dkv_add) { // (before the dsum pass, which the main kernel may overlap: PDL)
        const size_t bytes = plan.workspace.size(Piece::dk_accum);
        check_cuda(cudaMemsetAsync(args.dk_accum, 0, bytes, stream), "zeroing the dK scratch");
        check_cuda(cudaMemsetAsync(args.dv_accum, 0, bytes, stream), "zeroing the dV scratch");
    }
    bwd_dsum(args, p.dtype, stream); // also zeroes the dQ scratch rows the main kernel adds to
    launch_backward(plan, args, p.dtype, stream);
    bwd_finish(args, p.dtype, stream);
}

// ---------------------------------------------------------------------------------------------
// fa_combine (kernels/aux/combine.cu).

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
    launch_combine(args, static_cast<cudaStream_t>(p.stream), false, false);
}

} // namespace flashattn::cuda
