// fa_kvcache_forward on CUDA (flash_attn_with_kvcache): append the new keys/values (keys rotated)
// into the caches, rotate q into a packed copy, then run the attention over the caches as planned
// (host/planner.h's plan_kvcache: the inference kernels). Everything is queued on the call's stream;
// the device arrays (cache_seqlens, ...) are read only by kernels: no host synchronisation.
#include "host/device_info.h"
#include "host/device_scope.h"
#include "host/run.h"
#include "kernels/aux/append_kv.cuh"

#include "core/backend.h"
#include "core/error.h"
#include "core/overrides.h"
#include "core/problem.h"

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <utility>

namespace flashattn::cuda {
namespace {

using kernels::kRowsPerCta;

unsigned ctas_for(int64_t rows, const char* what) {
    const int64_t ctas = (rows + kRowsPerCta - 1) / kRowsPerCta;
    if (ctas > INT_MAX) fail(FA_ERROR_UNSUPPORTED, what, ": ", rows, " rows are more than one launch covers");
    return unsigned(ctas);
}

template <typename T>
void append_and_rotate(const KvCacheProblem& problem, void* q_rotated, DeviceFault* fault, cudaStream_t stream) {
    const fa_kvcache_params& p = problem.p;
    const fa_fwd_params& f = p.fwd;
    const KvLayout& kv = problem.attention.kv;
    kernels::CacheRows cache{};
    cache.cache_seqlens = p.cache_seqlens;
    cache.cache_batch_idx = p.cache_batch_idx;
    cache.cache_entries = int32_t(kv.cache_entries);
    cache.seqlen_k = f.seqlen_k;
    cache.seqlen_new = int32_t(kv.seqlen_new);
    cache.block_table = f.block_table;
    cache.block_table_stride = f.block_table_batch_stride;
    cache.page_size = f.page_size;
    cache.num_blocks = f.num_blocks;
    cache.fault = fault;
    kernels::RotaryTable rotary{p.rotary_cos, p.rotary_sin, p.rotary_dim, p.seqlen_rotary, p.rotary_interleaved != 0};

    const int64_t new_rows = int64_t(f.batch) * kv.seqlen_new * f.num_heads_k;
    if (new_rows > 0) { // every append is queued before the attention reads any cache
        kernels::AppendArgs args{f.batch,  f.num_heads_k, f.head_dim, f.head_dim_v, p.k_new,
                                 p.v_new,  f.k,           f.v,        cache,        rotary};
        kernels::append_kv_kernel<T><<<ctas_for(new_rows, "appending to the KV cache"), 32 * kRowsPerCta, 0, stream>>>(args);
        check_cuda(cudaGetLastError(), "launching the KV-cache append kernel");
    }
    const int64_t q_rows = int64_t(f.batch) * f.seqlen_q * f.num_heads;
    if (q_rotated && q_rows > 0) {
        kernels::RotateQueryArgs args{f.batch, f.seqlen_q, f.num_heads, f.head_dim, f.q, q_rotated, cache,
                                      problem.attention.mask.is_local(), rotary};
        kernels::rotate_query_kernel<T><<<ctas_for(q_rows, "rotating q"), 32 * kRowsPerCta, 0, stream>>>(args);
        check_cuda(cudaGetLastError(), "launching the rotary kernel for q");
    }
}

// The device of a KV-cache call: that of its first tensor with an element (-1: none has one, and
// there is nothing to append or compute).
int kvcache_device(const KvCacheProblem& problem) {
    const fa_kvcache_params& p = problem.p;
    for (const void* ptr : {p.fwd.q.data, p.fwd.k.data, p.k_new.data})
        if (const int device = device_of(ptr); device >= 0) return device;
    return -1;
}

ForwardPlan kvcache_plan(const KvCacheProblem& problem, int device) {
    DeviceGuard guard(device);
    return plan_kvcache(problem, device_info(device), current_overrides());
}

} // namespace

size_t kvcache_workspace_size(const KvCacheProblem& problem) {
    const int device = kvcache_device(problem);
    return device < 0 ? 0 : kvcache_plan(problem, device).workspace.total;
}

void kvcache_forward(const KvCacheProblem& problem) {
    const fa_kvcache_params& p = problem.p;
    const fa_fwd_params& f = p.fwd;
    require(f.dtype == FA_FLOAT16 || f.dtype == FA_BFLOAT16, "dtype must be FA_FLOAT16 or FA_BFLOAT16 on CUDA");
    const int device = kvcache_device(problem);
    if (device < 0) return; // no tensor has an element: nothing to append or compute
    for (const auto& [ptr, name] :
         {std::pair<const void*, const char*>{f.q.data, "fwd.q.data"}, {f.k.data, "fwd.k.data (k_cache)"},
          {f.v.data, "fwd.v.data (v_cache)"}, {f.block_table, "fwd.block_table"}, {p.cache_seqlens, "cache_seqlens"},
          {p.cache_batch_idx, "cache_batch_idx"}, {p.cache_leftpad, "cache_leftpad"}, {p.k_new.data, "k_new.data"},
          {p.v_new.data, "v_new.data"}, {p.rotary_cos, "rotary_cos"}, {p.rotary_sin, "rotary_sin"},
          {p.workspace, "workspace"}})
        require_on_device(ptr, device, name);
    // The plan and the workspace come first: a workspace too small is refused before anything is appended.
    const ForwardPlan plan = kvcache_plan(problem, device);
    DeviceGuard guard(device);
    const auto stream = static_cast<cudaStream_t>(f.stream);
    const Workspace workspace(p.workspace, p.workspace_size, plan.workspace, stream, "fa_kvcache_workspace_size");

    // q rotated into a packed (batch, seqlen_q, heads, head_dim) copy; the caller's q is untouched.
    void* const q_rotated = workspace.at(Piece::rotated_q);
    DeviceFault* const fault = device_fault_record(device);
    if (f.dtype == FA_FLOAT16) {
        append_and_rotate<__half>(problem, q_rotated, fault, stream);
    } else {
        append_and_rotate<__nv_bfloat16>(problem, q_rotated, fault, stream);
    }
    run_forward(kvcache_attention(problem, q_rotated), plan, workspace, device);
}

} // namespace flashattn::cuda
