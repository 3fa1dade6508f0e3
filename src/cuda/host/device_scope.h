// Small host-side helpers of the CUDA entry points (backend.cu, kvcache.cu): which device a pointer
// lives on, a scoped device switch, stream-ordered scratch memory, a call's workspace.
#pragma once

#include "host/cuda_check.h"
#include "host/planner.h"

#include "core/error.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace flashattn::cuda {

// The device of a pointer, or -1 when the CUDA runtime does not know it as device memory.
inline int device_of(const void* ptr) {
    if (!ptr) return -1;
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
        (void)cudaGetLastError(); // a host pointer can leave an error behind; it must not leak into the next call
        return -1;
    }
    const bool on_device = attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
    return on_device ? attributes.device : -1;
}

inline void require_on_device(const void* ptr, int device, const char* name) {
    if (!ptr) return;
    const int where = device_of(ptr);
    require(where >= 0, name, " is not CUDA device memory, but q is: every tensor and array of a CUDA call must be");
    require(where == device, name, " is on CUDA device ", where, " but q is on device ", device);
}

// Switches to the device that holds the tensors for the duration of a call.
class DeviceGuard {
public:
    explicit DeviceGuard(int device) {
        check_cuda(cudaGetDevice(&previous_), "querying the current device");
        if (device != previous_) check_cuda(cudaSetDevice(device), "selecting the tensors' device");
    }
    ~DeviceGuard() {
        int current = previous_;
        if (cudaGetDevice(&current) == cudaSuccess && current != previous_) (void)cudaSetDevice(previous_);
    }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

private:
    int previous_ = 0;
};

// Stream-ordered scratch memory, released on the same stream when it goes out of scope.
class StreamBuffer {
public:
    StreamBuffer(size_t bytes, cudaStream_t stream) : stream_(stream) {
        if (bytes) check_cuda(cudaMallocAsync(&data_, bytes, stream), "allocating device scratch memory");
    }
    ~StreamBuffer() {
        if (data_) (void)cudaFreeAsync(data_, stream_);
    }
    StreamBuffer(const StreamBuffer&) = delete;
    StreamBuffer& operator=(const StreamBuffer&) = delete;
    void* get() const { return data_; }

private:
    void* data_ = nullptr;
    cudaStream_t stream_;
};

// A caller's workspace holds 16-byte vectors (split-KV's fp32 partials, staged copies, the
// backward's accumulators): its base must be 16-byte aligned (each piece then is: pieces start at
// multiples of 256 bytes). Null (no workspace) passes.
inline void require_workspace_aligned(const void* workspace) {
    require(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, "workspace must be 16-byte aligned");
}

// The scratch memory of one call, carved as its plan's WorkspaceLayout says: from the caller's
// workspace (refused before any work is queued when it is smaller than the plan's total, which its
// size query returned), or, without one, from one stream-ordered allocation released on the
// stream after the call's work. A decode call measured ~1.2 us faster with its split-KV partials in
// a workspace than in cudaMallocAsync memory on the H200, and a workspace keeps every allocation in
// the caller's allocator (and out of captured CUDA graphs).
class Workspace {
public:
    // size_query: the function the caller asks for the size (named in errors).
    Workspace(void* base, size_t bytes, const WorkspaceLayout& layout, cudaStream_t stream, const char* size_query)
        : layout_(layout), owned_(base ? 0 : layout.total, stream) {
        if (base) {
            require_workspace_aligned(base);
            require(bytes >= layout.total, "workspace_size is ", bytes, " bytes but this call needs ", layout.total,
                    " (ask ", size_query, ")");
        }
        base_ = static_cast<char*>(base ? base : owned_.get());
    }
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    // The piece's memory; null for a piece the call does not use.
    void* at(Piece piece) const { return layout_.size(piece) ? base_ + layout_.at(piece) : nullptr; }
    float* floats(Piece piece) const { return static_cast<float*>(at(piece)); }

private:
    const WorkspaceLayout& layout_;
    StreamBuffer owned_;
    char* base_ = nullptr;
};

} // namespace flashattn::cuda
