// C++ face of the flashattn C ABI: same structs, failures as typed exceptions.
//
//   fa_fwd_params p = flashattn::default_fwd_params();
//   p.dtype = FA_BFLOAT16; p.batch = 2; ... p.q = {q_ptr, q_batch_stride, q_row_stride, q_head_stride};
//   flashattn::forward(p);          // throws flashattn::Error on bad input
#pragma once

#include <flashattn/flashattn.h>

#include <stdexcept>
#include <string>

namespace flashattn {

class Error : public std::runtime_error {
public:
    Error(fa_status status, const std::string& message) : std::runtime_error(message), status_(status) {}
    fa_status status() const noexcept { return status_; }

private:
    fa_status status_;
};

inline void check(fa_status status) {
    if (status != FA_OK) throw Error(status, std::string(fa_status_name(status)) + ": " + fa_last_error());
}

inline fa_fwd_params default_fwd_params() {
    fa_fwd_params p;
    fa_fwd_params_init(&p);
    return p;
}

inline fa_bwd_params default_bwd_params() {
    fa_bwd_params p;
    fa_bwd_params_init(&p);
    return p;
}

// workspace: fa_forward_workspace_size(&p) bytes of the caller's device memory (or NULL, 0).
inline void forward(const fa_fwd_params& p, void* workspace = nullptr, size_t workspace_size = 0) {
    check(fa_forward_with_workspace(&p, workspace, workspace_size));
}
inline void backward(const fa_bwd_params& p) { check(fa_backward(&p)); }
inline void varlen_forward(const fa_fwd_params& p, void* workspace = nullptr, size_t workspace_size = 0) {
    check(fa_varlen_forward_with_workspace(&p, workspace, workspace_size));
}
inline void varlen_backward(const fa_bwd_params& p) { check(fa_varlen_backward(&p)); }

inline fa_kvcache_params default_kvcache_params() {
    fa_kvcache_params p;
    fa_kvcache_params_init(&p);
    return p;
}

inline fa_combine_params default_combine_params() {
    fa_combine_params p;
    fa_combine_params_init(&p);
    return p;
}

inline void kvcache_forward(const fa_kvcache_params& p) { check(fa_kvcache_forward(&p)); }
inline void combine(const fa_combine_params& p) { check(fa_combine(&p)); }

inline bool cuda_available() { return fa_cuda_available() != 0; }

} // namespace flashattn
