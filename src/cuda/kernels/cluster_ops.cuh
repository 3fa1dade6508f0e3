// Thread block clusters (compute capability 9.0+): reads of another CTA's shared memory in the same
// cluster (distributed shared memory). The split-keys decode kernel merges its splits through them
// instead of through fp32 partials in global memory and a second kernel (fwd_decode_kernel.cuh).
// Everything here compiles to nothing below sm_90; the host never asks for it there.
#pragma once

#include <cstdint>

namespace flashattn::cuda::kernels {

// The address in the cluster's shared window of `local` (this CTA's shared memory) in the CTA of
// rank `rank`: every CTA of a kernel has the same shared-memory layout, so the same offset.
__device__ __forceinline__ uint32_t cluster_smem_address(const void* local, uint32_t rank) {
    uint32_t remote = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const uint32_t address = uint32_t(__cvta_generic_to_shared(local));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(address), "r"(rank));
#endif
    return remote;
}

__device__ __forceinline__ float load_cluster_f32(uint32_t address) {
    float x = 0.0f;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(x) : "r"(address) : "memory");
#endif
    return x;
}

__device__ __forceinline__ float4 load_cluster_f32x4(uint32_t address) {
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
                 : "=f"(x.x), "=f"(x.y), "=f"(x.z), "=f"(x.w)
                 : "r"(address)
                 : "memory");
#endif
    return x;
}

// Every thread of every CTA of the cluster arrives (its shared-memory writes released) and waits
// for all the others (theirs acquired). Called by every thread, from uniform control flow.
__device__ __forceinline__ void cluster_barrier() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ uint32_t rank_in_cluster() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    return rank;
#else
    return 0;
#endif
}

} // namespace flashattn::cuda::kernels
