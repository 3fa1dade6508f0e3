// How every attention kernel is launched: a one-dimensional grid (no 65535 limit on batch x heads;
// the kernel decodes its work item from blockIdx.x; the planner refuses grids past 2^31 - 1 CTAs)
// and dynamic shared memory; and how many CTAs of a kernel one SM holds.
#pragma once

#include "device/dependent_launch.h"
#include "host/cuda_check.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

namespace flashattn::cuda {

// dependent: launched as a programmatic dependent of the kernel before it (dependent_launch.h).
template <typename Kernel, typename Args>
void launch_on_grid(Kernel kernel, int64_t ctas, int threads, int smem_bytes, const Args& args, cudaStream_t stream,
                    const char* pass, bool dependent = false) {
    if (ctas <= 0) return;
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes), "setting the ",
               pass, " kernel's shared-memory size");
    if (dependent) return launch_maybe_dependent(kernel, unsigned(ctas), unsigned(threads), size_t(smem_bytes), stream,
                                                 true, args);
    kernel<<<dim3(unsigned(ctas)), dim3(threads), smem_bytes, stream>>>(args);
    check_cuda(cudaGetLastError(), "launching the ", pass, " kernel");
}

// CTAs of `kernel` one SM of the current device holds with `threads` threads and `smem_bytes` of
// dynamic shared memory (at least 1).
template <typename Kernel>
int ctas_per_sm(Kernel kernel, int threads, int smem_bytes) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes),
               "setting a kernel's shared-memory size");
    int ctas = 1;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, threads, smem_bytes),
               "querying a kernel's occupancy");
    return std::max(ctas, 1);
}

} // namespace flashattn::cuda
