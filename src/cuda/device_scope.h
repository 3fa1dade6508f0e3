// Small host-side helpers of the CUDA entry points (backend.cu, kvcache.cu, combine.cu,
// inference.cu): which device a pointer lives on, a scoped device switch, stream-ordered scratch
// memory.
#pragma once

#include "cuda_check.h"

#include "core/error.h"

#include <cuda_runtime.h>

#include <cstddef>

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

} // namespace flashattn::cuda
