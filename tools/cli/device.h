// Where the tensors live and how a call is timed: host memory and a steady clock for the CPU
// backend, cudaMalloc and CUDA events for the CUDA backend. Everything device-specific is behind this
// interface (device_cuda.cpp holds all the CUDA runtime code), so the runner, checker and bench are
// shared by both backends.
#pragma once

#include <flashattn/flashattn.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace flashattn::cli {

class Device {
public:
    virtual ~Device() = default;
    virtual fa_backend backend() const = 0;
    virtual std::string description() const = 0; // e.g. "cpu, 16 threads" or "cuda, NVIDIA H200"
    virtual void* allocate(size_t bytes) = 0;     // zero-filled; throws on failure
    virtual void release(void* data) = 0;
    virtual void upload(void* device_dst, const void* host_src, size_t bytes) = 0;
    virtual void download(void* host_dst, const void* device_src, size_t bytes) = 0;
    // Milliseconds that one call of `work` takes on this device.
    virtual double time_ms(const std::function<void()>& work) = 0;
};

std::unique_ptr<Device> make_cpu_device();
// Throws UsageError when this build has no CUDA backend or no usable device.
std::unique_ptr<Device> make_cuda_device();

// A device allocation that frees itself.
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(Device& device, size_t bytes) : device_(&device), bytes_(bytes) {
        if (bytes > 0) data_ = device.allocate(bytes);
    }
    DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
    DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
        std::swap(device_, other.device_);
        std::swap(data_, other.data_);
        std::swap(bytes_, other.bytes_);
        return *this;
    }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() {
        if (data_) device_->release(data_);
    }

    template <typename T = void>
    T* get() const { return static_cast<T*>(data_); }
    size_t bytes() const { return bytes_; }

private:
    Device* device_ = nullptr;
    void* data_ = nullptr;
    size_t bytes_ = 0;
};

} // namespace flashattn::cli
