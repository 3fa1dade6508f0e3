// The C ABI: validate, pick a backend, run it, and turn C++ exceptions into status codes. Nothing
// escapes this file as an exception: a C caller (or a Python binding) only ever sees fa_status.
#include "backend.h"
#include "error.h"
#include "overrides.h"
#include "problem.h"

#include <flashattn/flashattn.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <new>
#include <string>

namespace flashattn {
namespace {

thread_local std::string last_error_message;

template <typename Body>
fa_status guarded(Body&& body) {
    try {
        body();
        last_error_message.clear();
        return FA_OK;
    } catch (const Error& e) {
        last_error_message = e.what();
        return e.status();
    } catch (const std::bad_alloc&) {
        last_error_message = "out of host memory";
        return FA_ERROR_OUT_OF_MEMORY;
    } catch (const std::exception& e) {
        last_error_message = std::string("internal error: ") + e.what();
        return FA_ERROR_INTERNAL;
    } catch (...) {
        last_error_message = "internal error: unknown exception";
        return FA_ERROR_INTERNAL;
    }
}

enum class Target { cpu, cuda };

// The buffer whose memory decides where a call runs: q.data, or, when q is empty and has no
// address (PyTorch gives zero-element tensors a null pointer), the first of k, v, out that has one.
struct Locator {
    const char* name;
    const void* ptr;
};
Locator locating_buffer(const fa_fwd_params& p) {
    if (p.q.data) return {"q.data", p.q.data};
    if (p.k.data) return {"k.data", p.k.data};
    if (p.v.data) return {"v.data", p.v.data};
    return {"out.data", p.out.data};
}

// Like PyTorch's SDPA dispatch: each rejection says why.
Target choose_backend(const fa_fwd_params& p) {
    const Locator where = locating_buffer(p);
    const bool on_device = cuda::is_device_pointer(where.ptr);
    switch (p.backend) {
        case FA_BACKEND_CPU:
            require(!on_device, "backend is FA_BACKEND_CPU but ", where.name, " is CUDA device memory");
            return Target::cpu;
        case FA_BACKEND_CUDA:
            if (!cuda::available())
                fail(FA_ERROR_BACKEND_UNAVAILABLE,
                     "backend is FA_BACKEND_CUDA but this build has no CUDA backend or no CUDA device is usable");
            require(on_device, "backend is FA_BACKEND_CUDA but ", where.name, " is not CUDA device memory");
            break;
        default:
            if (!on_device) return Target::cpu;
            break;
    }
    if (p.dtype == FA_FLOAT32)
        fail(FA_ERROR_UNSUPPORTED, "dtype float32 is supported by the CPU backend only; use float16 or bfloat16 on CUDA");
    return Target::cuda;
}

struct NamedPointer {
    const char* name;
    const void* ptr;
};

// Every buffer must live where q lives: a device k with a host q would send the CPU backend
// reading device memory. Only CUDA builds can tell the two apart; elsewhere all memory is host.
void require_same_memory(Target target, std::initializer_list<NamedPointer> buffers) {
    for (const NamedPointer& b : buffers) {
        if (!b.ptr) continue;
        const bool on_device = cuda::is_device_pointer(b.ptr);
        require(on_device == (target == Target::cuda), b.name, " is ", on_device ? "CUDA device" : "host",
                " memory but q.data (or, for an empty q, the first of k, v, out with an address) is ",
                target == Target::cuda ? "CUDA device" : "host", " memory: every buffer must be on the same device");
    }
}

void require_same_memory(Target target, const fa_fwd_params& p) {
    require_same_memory(target, {{"k.data", p.k.data}, {"v.data", p.v.data}, {"out.data", p.out.data},
                                 {"softmax_lse", p.softmax_lse}, {"cu_seqlens_q", p.cu_seqlens_q},
                                 {"cu_seqlens_k", p.cu_seqlens_k}, {"seqused_k", p.seqused_k},
                                 {"alibi_slopes", p.alibi_slopes}, {"attn_probs", p.attn_probs},
                                 {"block_table", p.block_table}, {"rng_state", p.rng_state},
                                 {"learnable_sink", p.learnable_sink}});
}

void run_kvcache_forward(const fa_kvcache_params* params) {
    KvCacheProblem problem = make_kvcache_problem(params);
    const fa_kvcache_params& p = problem.p;
    const Target target = choose_backend(p.fwd);
    require_same_memory(target, p.fwd);
    require_same_memory(target, {{"cache_seqlens", p.cache_seqlens}, {"cache_batch_idx", p.cache_batch_idx},
                                 {"cache_leftpad", p.cache_leftpad}, {"k_new.data", p.k_new.data},
                                 {"v_new.data", p.v_new.data}, {"rotary_cos", p.rotary_cos},
                                 {"rotary_sin", p.rotary_sin}});
    if (target == Target::cpu) {
        check_kvcache_arrays(problem);
        cpu::kvcache_forward(problem);
    } else {
        cuda::kvcache_forward(problem);
    }
}

void run_combine(const fa_combine_params* params) {
    const CombineProblem problem = make_combine_problem(params);
    const fa_combine_params& p = problem.p;
    // The partial outputs decide where this runs, as q does for attention.
    fa_fwd_params where;
    fa_fwd_params_init(&where);
    where.q.data = p.out_partial.data;
    where.backend = p.backend;
    // The partials are fp32 on every backend and both backends write any out dtype (fp32 included),
    // so choose_backend's dtype rule for attention inputs does not apply: ask with a 16-bit one.
    where.dtype = FA_BFLOAT16;
    const Target target = choose_backend(where);
    require_same_memory(target, {{"out.data", p.out.data}, {"lse_partial.data", p.lse_partial.data},
                                 {"lse.data", p.lse.data}});
    if (target == Target::cpu) cpu::combine(problem);
    else cuda::combine(problem);
}

// workspace: the caller's CUDA scratch (fa_forward_with_workspace), NULL = allocated per call.
void run_forward(const fa_fwd_params* params, bool varlen, void* workspace = nullptr, size_t workspace_size = 0) {
    Problem problem = make_problem(params, varlen);
    require(workspace != nullptr || workspace_size == 0, "workspace_size is ", workspace_size,
            " but workspace is NULL (set both, or neither)");
    const Target target = choose_backend(problem.p);
    require_same_memory(target, problem.p);
    if (target == Target::cpu) {
        check_sequence_arrays(problem);
        cpu::forward(problem); // (no scratch to take: the workspace is ignored)
    } else {
        cuda::forward(problem, workspace, workspace_size);
    }
}

void run_backward(const fa_bwd_params* params, bool varlen) {
    BwdProblem problem = make_bwd_problem(params, varlen);
    const Target target = choose_backend(problem.fwd.p);
    require_same_memory(target, problem.fwd.p);
    require_same_memory(target, {{"dout.data", problem.p.dout.data}, {"dq.data", problem.p.dq.data},
                                 {"dk.data", problem.p.dk.data}, {"dv.data", problem.p.dv.data},
                                 {"workspace", problem.p.workspace}, {"dsink", problem.p.dsink}});
    if (target == Target::cpu) {
        check_sequence_arrays(problem.fwd);
        cpu::backward(problem);
    } else {
        cuda::backward(problem);
    }
}

} // namespace
} // namespace flashattn

using namespace flashattn;

extern "C" {

void fa_fwd_params_init_sized(fa_fwd_params* params, size_t size) {
    if (!params || size < sizeof(uint32_t)) return;
    // Only the caller's bytes are written: a struct from an older header ends earlier. Every field
    // of 0.1.0 lies in its prefix; the defaults of later fields (block table, rng_state, head_dim_v,
    // learnable_sink) are all zero.
    std::memset(params, 0, std::min(size, sizeof(fa_fwd_params)));
    params->struct_size = uint32_t(size);
    if (size < kFwdParamsSize_0_1) return; // unknown: validation will say so
    params->dtype = FA_BFLOAT16;
    params->window_left = -1;
    params->window_right = -1;
    params->num_splits = 1;
    params->backend = FA_BACKEND_AUTO;
}

void fa_bwd_params_init_sized(fa_bwd_params* params, size_t size) {
    if (!params || size < sizeof(uint32_t)) return;
    std::memset(params, 0, std::min(size, sizeof(fa_bwd_params)));
    params->struct_size = uint32_t(size);
    // An earlier header's fwd member is its earlier fa_fwd_params; its fields after fwd (all
    // defaulting to 0) sit earlier than today's, inside the zeroed bytes.
    const size_t known_fwd_size = fwd_params_size_in_bwd(size);
    const size_t fwd_size = known_fwd_size ? known_fwd_size : sizeof(fa_fwd_params);
    if (size >= offsetof(fa_bwd_params, fwd) + fwd_size) fa_fwd_params_init_sized(&params->fwd, fwd_size);
}

// The symbols a 0.1.0 binary calls (the header's macros of the same names pass today's size).
void(fa_fwd_params_init)(fa_fwd_params* params) { fa_fwd_params_init_sized(params, kFwdParamsSize_0_1); }
void(fa_bwd_params_init)(fa_bwd_params* params) { fa_bwd_params_init_sized(params, kBwdParamsSize_0_1); }

void fa_kvcache_params_init_sized(fa_kvcache_params* params, size_t size) {
    if (!params || size < sizeof(uint32_t)) return;
    std::memset(params, 0, std::min(size, sizeof(fa_kvcache_params)));
    params->struct_size = uint32_t(size);
    const size_t fwd_size = fwd_params_size_in_kvcache(size);
    if (fwd_size == 0) return; // validation will say so
    // An earlier layout has a shorter fwd member and the fields after it that much earlier (the one
    // before the workspace fields also ends earlier; they default to zero).
    fa_fwd_params_init_sized(&params->fwd, fwd_size);
    params->fwd.num_splits = 0; // flash_attn_with_kvcache's default: let the backend choose
    const int32_t batch_cache = 1; // the only non-zero default after fwd
    const size_t batch_cache_at = offsetof(fa_kvcache_params, batch_cache) - (sizeof(fa_fwd_params) - fwd_size);
    std::memcpy(reinterpret_cast<char*>(params) + batch_cache_at, &batch_cache, sizeof batch_cache);
}

// The symbol a binary built before rng_state calls (the header's macro passes today's size).
void(fa_kvcache_params_init)(fa_kvcache_params* params) { fa_kvcache_params_init_sized(params, kKvCacheParamsSize_paged); }

void fa_combine_params_init(fa_combine_params* params) {
    if (!params) return;
    std::memset(params, 0, sizeof(*params));
    params->struct_size = sizeof(fa_combine_params);
    params->num_splits = 1;
    params->dtype = FA_BFLOAT16;
    params->backend = FA_BACKEND_AUTO;
}

fa_status fa_forward(const fa_fwd_params* params) { return guarded([&] { run_forward(params, false); }); }
fa_status fa_varlen_forward(const fa_fwd_params* params) { return guarded([&] { run_forward(params, true); }); }
fa_status fa_forward_with_workspace(const fa_fwd_params* params, void* workspace, size_t workspace_size) {
    return guarded([&] { run_forward(params, false, workspace, workspace_size); });
}
fa_status fa_varlen_forward_with_workspace(const fa_fwd_params* params, void* workspace, size_t workspace_size) {
    return guarded([&] { run_forward(params, true, workspace, workspace_size); });
}
fa_status fa_backward(const fa_bwd_params* params) { return guarded([&] { run_backward(params, false); }); }
fa_status fa_varlen_backward(const fa_bwd_params* params) { return guarded([&] { run_backward(params, true); }); }
fa_status fa_kvcache_forward(const fa_kvcache_params* params) { return guarded([&] { run_kvcache_forward(params); }); }
fa_status fa_combine(const fa_combine_params* params) { return guarded([&] { run_combine(params); }); }

fa_status fa_check_device_faults(int device, void* stream) {
    return guarded([&] {
        if (!cuda::available())
            fail(FA_ERROR_BACKEND_UNAVAILABLE, "fa_check_device_faults: this build has no CUDA backend or no CUDA "
                                               "device is usable (the CPU backend reports bad values at the call)");
        cuda::check_device_faults(device, stream);
    });
}

size_t fa_forward_workspace_size(const fa_fwd_params* params) {
    size_t bytes = 0;
    const bool varlen = params && params->cu_seqlens_q != nullptr;
    guarded([&] {
        const Problem problem = make_problem(params, varlen);
        if (choose_backend(problem.p) == Target::cuda) bytes = cuda::fwd_workspace_size(problem);
    });
    return bytes;
}

size_t fa_bwd_workspace_size(const fa_bwd_params* params) {
    size_t bytes = 0;
    const bool varlen = params && params->fwd.cu_seqlens_q != nullptr;
    guarded([&] {
        BwdProblem problem = make_bwd_problem(params, varlen);
        if (choose_backend(problem.fwd.p) == Target::cuda) bytes = cuda::bwd_workspace_size(problem);
    });
    return bytes;
}

size_t fa_kvcache_workspace_size(const fa_kvcache_params* params) {
    size_t bytes = 0;
    guarded([&] {
        const KvCacheProblem problem = make_kvcache_problem(params);
        if (choose_backend(problem.p.fwd) == Target::cuda) bytes = cuda::kvcache_workspace_size(problem);
    });
    return bytes;
}

const char* fa_last_error(void) { return last_error_message.c_str(); }

const char* fa_status_name(fa_status status) {
    switch (status) {
        case FA_OK: return "FA_OK";
        case FA_ERROR_INVALID_ARGUMENT: return "FA_ERROR_INVALID_ARGUMENT";
        case FA_ERROR_UNSUPPORTED: return "FA_ERROR_UNSUPPORTED";
        case FA_ERROR_BACKEND_UNAVAILABLE: return "FA_ERROR_BACKEND_UNAVAILABLE";
        case FA_ERROR_DEVICE: return "FA_ERROR_DEVICE";
        case FA_ERROR_OUT_OF_MEMORY: return "FA_ERROR_OUT_OF_MEMORY";
        case FA_ERROR_INTERNAL: return "FA_ERROR_INTERNAL";
    }
    return "FA_ERROR_UNKNOWN";
}

const char* fa_version_string(void) { return FLASHATTN_VERSION_STRING; }

int fa_cuda_available(void) { return cuda::available() ? 1 : 0; }

void fa_set_num_threads(int num_threads) { cpu::set_num_threads(num_threads < 0 ? 0 : num_threads); }
int fa_get_num_threads(void) { return cpu::num_threads(); }

fa_status fa_set_overrides(const char* spec) { return guarded([&] { set_overrides(spec); }); }

} // extern "C"
