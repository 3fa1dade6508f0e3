// The two backends behind the C ABI. Each receives a validated Problem and owns nothing else.
#pragma once

#include "problem.h"

#include <cstddef>

namespace flashattn {

namespace cpu {
void forward(const Problem& problem);
void backward(const BwdProblem& problem);
void kvcache_forward(const KvCacheProblem& problem);
void combine(const CombineProblem& problem);
void set_num_threads(int num_threads); // 0 = default
int num_threads();
} // namespace cpu

// Implemented in src/cuda/ when the CUDA backend is built, else by cuda_unavailable.cpp.
namespace cuda {
bool available();                          // built, and a device is usable
bool is_device_pointer(const void* ptr);   // false when the backend is not built
void forward(const Problem& problem, void* workspace, size_t workspace_size); // NULL: allocates per call
size_t fwd_workspace_size(const Problem& problem);
void backward(const BwdProblem& problem);
size_t bwd_workspace_size(const BwdProblem& problem);
void kvcache_forward(const KvCacheProblem& problem);
size_t kvcache_workspace_size(const KvCacheProblem& problem);
void combine(const CombineProblem& problem);
// Waits for `stream` (a cudaStream_t of `device`), then reports and clears the first fault the
// kernels found in a device-side index array since the last check (src/cuda/device_faults.h).
void check_device_faults(int device, void* stream);
} // namespace cuda

} // namespace flashattn
