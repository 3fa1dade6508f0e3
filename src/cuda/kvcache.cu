// fa_kvcache_forward on CUDA (flash_attn_with_kvcache): append the new keys/values (keys rotated)
// into the caches, rotate q into a packed copy, then run the attention over the caches through the
// ordinary entry point, whose KV layout (pages, cache entries, left padding, cache lengths) sends it
// to the inference variant of the SM80 kernel (inference.cu). Everything is queued on the call's
// stream; the device arrays (cache_seqlens, ...) are read only by kernels: no host synchronisation.
#include "kernels/append_kv.cuh"

#include "device_scope.h"

#include "core/backend.h"
#include "core/error.h"
#include "core/problem.h"

#include <climits>
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
void append_and_rotate(const KvCacheProblem& problem, void* q_rotated, cudaStream_t stream) {
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
    kernels::RotaryTable rotary{p.rotary_cos, p.rotary_sin, p.rotary_dim, p.seqlen_rotary, p.rotary_interleaved != 0};

    const int64_t new_rows = int64_t(f.batch) * kv.seqlen_new * f.num_heads_k;
    if (new_rows > 0) { // every append is queued before the attention reads any cache
        kernels::AppendArgs args{f.batch, f.num_heads_k, f.head_dim, p.k_new, p.v_new, f.k, f.v, cache, rotary};
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

} // namespace

void kvcache_forward(const KvCacheProblem& problem) {
    const fa_kvcache_params& p = problem.p;
    const fa_fwd_params& f = p.fwd;
    require(f.dtype == FA_FLOAT16 || f.dtype == FA_BFLOAT16, "dtype must be FA_FLOAT16 or FA_BFLOAT16 on CUDA");
    int device = -1;
    for (const void* ptr : {f.q.data, f.k.data, p.k_new.data}) {
        if (device < 0) device = device_of(ptr);
    }
    if (device < 0) return; // no tensor has an element: nothing to append or compute
    for (const auto& [ptr, name] :
         {std::pair<const void*, const char*>{f.q.data, "fwd.q.data"}, {f.k.data, "fwd.k.data (k_cache)"},
          {f.v.data, "fwd.v.data (v_cache)"}, {f.block_table, "fwd.block_table"}, {p.cache_seqlens, "cache_seqlens"},
          {p.cache_batch_idx, "cache_batch_idx"}, {p.cache_leftpad, "cache_leftpad"}, {p.k_new.data, "k_new.data"},
          {p.v_new.data, "v_new.data"}, {p.rotary_cos, "rotary_cos"}, {p.rotary_sin, "rotary_sin"}})
        require_on_device(ptr, device, name);
    DeviceGuard guard(device);
    const auto stream = static_cast<cudaStream_t>(f.stream);

    // q rotated into a packed (batch, seqlen_q, heads, head_dim) copy; the caller's q is untouched.
    Problem attention = problem.attention;
    const int64_t q_elements = int64_t(f.batch) * f.seqlen_q * f.num_heads * f.head_dim;
    StreamBuffer q_rotated(problem.rotary() ? size_t(q_elements) * 2 : 0, stream);
    if (problem.rotary())
        attention.p.q = fa_tensor{q_rotated.get(), int64_t(f.seqlen_q) * f.num_heads * f.head_dim,
                                  int64_t(f.num_heads) * f.head_dim, f.head_dim};

    if (f.dtype == FA_FLOAT16) {
        append_and_rotate<__half>(problem, q_rotated.get(), stream);
    } else {
        append_and_rotate<__nv_bfloat16>(problem, q_rotated.get(), stream);
    }
    forward(attention);
}

} // namespace flashattn::cuda
