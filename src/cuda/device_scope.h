// Small host-side helpers of the CUDA entry points (backend.cu, kvcache.cu, combine.cu,
// inference.cu): which device a pointer lives on, a scoped device switch, stream-ordered scratch
// memory, a call's workspace.
#pragma once

#include "cuda_check.h"

#include "core/error.h"

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <deque>

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
// backward's accumulators): its base must be 16-byte aligned (each piece then is: piece() rounds
// sizes to 256 bytes). Null (no workspace) passes.
inline void require_workspace_aligned(const void* workspace) {
    require(reinterpret_cast<uintptr_t>(workspace) % 16 == 0, "workspace must be 16-byte aligned");
}

// The scratch memory of one call, taken piece by piece: from the caller's workspace (each piece
// rounded up by piece(), in the order the call takes them, so that a size query that adds up the
// same pieces agrees with the call), or, without one, from stream-ordered allocations released
// after the call's work. A decode call measured ~1.2 us faster with its split-KV partials in a
// workspace than in cudaMallocAsync/cudaFreeAsync memory (H200, session 10: 1k x 1 0.35 -> 0.39
// TB/s), and a workspace keeps every allocation in the caller's allocator (and out of CUDA graphs).
class Workspace {
public:
    // base == nullptr: allocate each piece. size_query: what the caller asks for the size (errors).
    Workspace(void* base, size_t bytes, cudaStream_t stream, const char* size_query)
        : base_(static_cast<char*>(base)), size_(bytes), stream_(stream), size_query_(size_query) {}
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    static constexpr size_t piece(size_t bytes) { return (bytes + 255) / 256 * 256; }

    // A caller's workspace smaller than the call's `bytes` (its size query's answer) is refused
    // before any work is enqueued (take() alone would fail halfway, after a KV cache was appended to).
    void require_at_least(size_t bytes) const {
        if (base_)
            require(size_ >= bytes, "workspace_size is ", size_, " bytes but this call needs ", bytes, " (ask ",
                    size_query_, ")");
    }

    void* take(size_t bytes) {
        if (bytes == 0) return nullptr;
        if (!base_) return owned_.emplace_back(bytes, stream_).get();
        require(used_ + piece(bytes) <= size_, "workspace_size is ", size_, " bytes but this call needs at least ",
                used_ + piece(bytes), " (ask ", size_query_, ")");
        void* at = base_ + used_;
        used_ += piece(bytes);
        return at;
    }

private:
    char* base_;
    size_t size_;
    size_t used_ = 0;
    cudaStream_t stream_;
    const char* size_query_;
    std::deque<StreamBuffer> owned_; // deque: its elements never move
};

} // namespace flashattn::cuda
