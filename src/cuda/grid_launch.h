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

// The same grid in clusters of `cluster` consecutive CTAs (compute capability 9.0+; above 8 CTAs,
// the non-portable sizes the H100 / H200 allow), placed on the SMs by `policy`.
template <typename Args>
void launch_on_grid_in_clusters(void (*kernel)(Args), int64_t ctas, int cluster, cudaClusterSchedulingPolicy policy,
                                int threads, int smem_bytes, const Args& args, cudaStream_t stream, const char* pass) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes), "setting the ",
               pass, " kernel's shared-memory size");
    if (cluster > 8)
        check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1), "allowing the ",
                   pass, " kernel clusters of ", cluster, " CTAs");
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(unsigned(ctas));
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = size_t(smem_bytes);
    config.stream = stream;
    cudaLaunchAttribute attributes[2]{};
    attributes[0].id = cudaLaunchAttributeClusterDimension;
    attributes[0].val.clusterDim.x = unsigned(cluster);
    attributes[0].val.clusterDim.y = 1;
    attributes[0].val.clusterDim.z = 1;
    attributes[1].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
    attributes[1].val.clusterSchedulingPolicyPreference = policy;
    config.attrs = attributes;
    config.numAttrs = 2;
    check_cuda(cudaLaunchKernelEx(&config, kernel, args), "launching the ", pass, " kernel in clusters of ", cluster);
}

} // namespace flashattn::cuda
