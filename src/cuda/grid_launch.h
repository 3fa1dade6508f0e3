// How every attention kernel of the backend is launched: a one-dimensional grid (no 65535 limit on
// batch x heads; the kernel decodes its work item from blockIdx.x), dynamic shared memory.
#pragma once

#include "cuda_check.h"

#include "core/error.h"

#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

namespace flashattn::cuda {

// False when there is nothing to launch; refuses grids beyond 2^31 - 1 CTAs, naming the pass and
// the factors of its grid (`factors...`, e.g. "query blocks of ", 128, " rows x batch ", 4, ...).
template <typename... Factors>
bool grid_has_work(int64_t ctas, const char* pass, const Factors&... factors) {
    if (ctas > INT_MAX)
        fail(FA_ERROR_UNSUPPORTED, "the CUDA ", pass, " needs ", ctas, " thread blocks (", factors...,
             "), more than the 2^31-1 a grid holds");
    return ctas > 0;
}

template <typename Kernel, typename Args>
void launch_on_grid(Kernel kernel, int64_t ctas, int threads, int smem_bytes, const Args& args, cudaStream_t stream,
                    const char* pass) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes), "setting the ",
               pass, " kernel's shared-memory size");
    kernel<<<dim3(unsigned(ctas)), dim3(threads), smem_bytes, stream>>>(args);
    check_cuda(cudaGetLastError(), "launching the ", pass, " kernel");
}

} // namespace flashattn::cuda
