// Programmatic dependent launch (compute capability 9.0+): a kernel launched with it may start
// while the kernel before it in the stream is still running, and waits for that kernel's results
// with griddepcontrol.wait. What it saves is the gap between two short kernels (the launch latency
// and the ramp of the second grid, a few microseconds): split-KV decode's combine after its main
// kernel, where one decode step lasts 15-150 us.
//
// The rule for a dependent kernel: call wait_for_prerequisite_grid() before touching anything the
// kernels before it wrote, or anything those kernels read that it writes. The primary calls
// allow_dependent_launch() from the point where the dependent may start occupying SMs; the
// dependent grid is launched once every CTA of the primary has called it or exited (so a CTA of a
// later wave that has not started yet holds it back). On older devices, and in kernels launched
// without the attribute, both are no-ops.
#pragma once

#include "cuda_check.h"

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>

namespace flashattn::cuda {

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

__device__ __forceinline__ void wait_for_prerequisite_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Whether launches on `device` use it: compute capability 9.0 or newer, unless FLASHATTN_CUDA_PDL=0
// (read per call, so that one process can time both). On by default since session 9, when the
// split-keys kernel started to allow the combine's launch after its main loop rather than at its
// start: decode at batch 1 measured 1.3-1.5 us faster a call on the H200 (1k x 1 11.2 -> 9.9 us,
// 32k x 1 41.1 -> 39.7; the gap between the kernels and the combine's launch overlap the
// kernel's last CTAs). At the start it had measured mixed (sessions 5 and 8): the waiting combine
// CTAs took SM slots the main loop needed.
inline bool dependent_launch_available(int device) {
    const char* choice = std::getenv("FLASHATTN_CUDA_PDL");
    if (choice && std::strcmp(choice, "0") == 0) return false;
    int major = 0;
    check_cuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), "querying the device");
    return major >= 9;
}

// kernel<<<blocks, threads, smem_bytes, stream>>>(args), as a programmatic dependent of the work
// before it in the stream when `dependent` (the kernel must begin with wait_for_prerequisite_grid).
template <typename Args>
void launch_maybe_dependent(void (*kernel)(Args), unsigned blocks, unsigned threads, size_t smem_bytes,
                            cudaStream_t stream, bool dependent, const Args& args) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(threads);
    config.dynamicSmemBytes = smem_bytes;
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute.val.programmaticStreamSerializationAllowed = 1;
    config.attrs = &attribute;
    config.numAttrs = dependent ? 1 : 0;
    check_cuda(cudaLaunchKernelEx(&config, kernel, args), "launching a kernel");
}

} // namespace flashattn::cuda
