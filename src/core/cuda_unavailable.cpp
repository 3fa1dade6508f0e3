// Stand-in for the CUDA backend in builds without nvcc: every entry point says so clearly.
#include "backend.h"
#include "error.h"

namespace flashattn::cuda {

static const char* const kNotBuilt =
    "the CUDA backend is not part of this build (configure with -DFLASHATTN_CUDA=ON on a machine with nvcc)";

bool available() { return false; }
bool is_device_pointer(const void*) { return false; }
void forward(const Problem&, void*, size_t) { fail(FA_ERROR_BACKEND_UNAVAILABLE, kNotBuilt); }
size_t fwd_workspace_size(const Problem&) { return 0; }
void backward(const BwdProblem&) { fail(FA_ERROR_BACKEND_UNAVAILABLE, kNotBuilt); }
size_t bwd_workspace_size(const BwdProblem&) { return 0; }
void kvcache_forward(const KvCacheProblem&) { fail(FA_ERROR_BACKEND_UNAVAILABLE, kNotBuilt); }
size_t kvcache_workspace_size(const KvCacheProblem&) { return 0; }
void combine(const CombineProblem&) { fail(FA_ERROR_BACKEND_UNAVAILABLE, kNotBuilt); }
void check_device_faults(int, void*) { fail(FA_ERROR_BACKEND_UNAVAILABLE, kNotBuilt); }

} // namespace flashattn::cuda
