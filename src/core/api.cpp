// The C ABI: validate, pick a backend, run it, and turn C++ exceptions into status codes. Nothing
// escapes this file as an exception: a C caller (or a Python binding) only ever sees fa_status.
#include "backend.h"
#include "error.h"
#include "problem.h"

#include <flashattn/flashattn.h>

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

// Like PyTorch's SDPA dispatch: each rejection says why.
Target choose_backend(const fa_fwd_params& p) {
    const bool on_device = cuda::is_device_pointer(p.q.data);
    switch (p.backend) {
        case FA_BACKEND_CPU:
            require(!on_device, "backend is FA_BACKEND_CPU but q.data is CUDA device memory");
            return Target::cpu;
        case FA_BACKEND_CUDA:
            if (!cuda::available())
                fail(FA_ERROR_BACKEND_UNAVAILABLE,
                     "backend is FA_BACKEND_CUDA but this build has no CUDA backend or no CUDA device is usable");
            require(on_device, "backend is FA_BACKEND_CUDA but q.data is not CUDA device memory");
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
                " memory but q.data is ", target == Target::cuda ? "CUDA device" : "host",
                " memory: every buffer must be on the same device");
    }
}

void require_same_memory(Target target, const fa_fwd_params& p) {
    require_same_memory(target, {{"k.data", p.k.data}, {"v.data", p.v.data}, {"out.data", p.out.data},
                                 {"softmax_lse", p.softmax_lse}, {"cu_seqlens_q", p.cu_seqlens_q},
                                 {"cu_seqlens_k", p.cu_seqlens_k}, {"seqused_k", p.seqused_k},
                                 {"alibi_slopes", p.alibi_slopes}, {"attn_probs", p.attn_probs}});
}

void run_forward(const fa_fwd_params* params, bool varlen) {
    Problem problem = make_problem(params, varlen);
    const Target target = choose_backend(problem.p);
    require_same_memory(target, problem.p);
    if (target == Target::cpu) {
        check_sequence_arrays(problem);
        cpu::forward(problem);
    } else {
        cuda::forward(problem);
    }
}

void run_backward(const fa_bwd_params* params, bool varlen) {
    BwdProblem problem = make_bwd_problem(params, varlen);
    const Target target = choose_backend(problem.fwd.p);
    require_same_memory(target, problem.fwd.p);
    require_same_memory(target, {{"dout.data", problem.p.dout.data}, {"dq.data", problem.p.dq.data},
                                 {"dk.data", problem.p.dk.data}, {"dv.data", problem.p.dv.data},
                                 {"workspace", problem.p.workspace}});
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

void fa_fwd_params_init(fa_fwd_params* params) {
    if (!params) return;
    std::memset(params, 0, sizeof(*params));
    params->struct_size = sizeof(fa_fwd_params);
    params->dtype = FA_BFLOAT16;
    params->window_left = -1;
    params->window_right = -1;
    params->num_splits = 1;
    params->backend = FA_BACKEND_AUTO;
}

void fa_bwd_params_init(fa_bwd_params* params) {
    if (!params) return;
    std::memset(params, 0, sizeof(*params));
    params->struct_size = sizeof(fa_bwd_params);
    fa_fwd_params_init(&params->fwd);
}

fa_status fa_forward(const fa_fwd_params* params) { return guarded([&] { run_forward(params, false); }); }
fa_status fa_varlen_forward(const fa_fwd_params* params) { return guarded([&] { run_forward(params, true); }); }
fa_status fa_backward(const fa_bwd_params* params) { return guarded([&] { run_backward(params, false); }); }
fa_status fa_varlen_backward(const fa_bwd_params* params) { return guarded([&] { run_backward(params, true); }); }

size_t fa_bwd_workspace_size(const fa_bwd_params* params) {
    size_t bytes = 0;
    const bool varlen = params && params->fwd.cu_seqlens_q != nullptr;
    guarded([&] {
        BwdProblem problem = make_bwd_problem(params, varlen);
        if (choose_backend(problem.fwd.p) == Target::cuda) bytes = cuda::bwd_workspace_size(problem);
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

} // extern "C"
