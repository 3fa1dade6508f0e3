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

#include "host/cuda_check.h"

#include <cuda_runtime.h>


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

// kernel<<<blocks, threads, smem_bytes, stream>>>(args), as a programmatic dependent of the work
// before it in the stream when `dependent` (the kernel must begin with wait_for_prerequisite_grid;
// the planner asks for it on compute capability 9.0 and newer, after the decode kernel: decode at
// batch 1 measured 1.3-1.5 us faster a call on the H200, docs/perf-log.md).
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
