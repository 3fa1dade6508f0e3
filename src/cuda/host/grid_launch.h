// How every attention kernel is launched: a one-dimensional grid (no 65535 limit on batch x heads;
// the kernel decodes its work item from blockIdx.x; the planner refuses grids past 2^31 - 1 CTAs)
// and dynamic shared memory.
#pragma once

#include "host/cuda_check.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace flashattn::cuda {

template <typename Kernel, typename Args>
void launch_on_grid(Kernel kernel, int64_t ctas, int threads, int smem_bytes, const Args& args, cudaStream_t stream,
                    const char* pass) {
    if (ctas <= 0) return;
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes), "setting the ",
               pass, " kernel's shared-memory size");
    kernel<<<dim3(unsigned(ctas)), dim3(threads), smem_bytes, stream>>>(args);
    check_cuda(cudaGetLastError(), "launching the ", pass, " kernel");
}

} // namespace flashattn::cuda
