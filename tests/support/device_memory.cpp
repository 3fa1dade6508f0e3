#include "device_memory.h"

#include <stdexcept>

#if FLASHATTN_TESTS_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace flashattn::testing {

#if FLASHATTN_TESTS_WITH_CUDA

namespace {
void check_cuda(cudaError_t status, const char* what) {
    if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}
} // namespace

DeviceMirror::~DeviceMirror() {
    for (const Region& r : regions_) cudaFree(r.device);
}

void* DeviceMirror::mirror(const void* host, size_t bytes, bool is_output) {
    if (host == nullptr) return nullptr;
    void* device = nullptr;
    check_cuda(cudaMalloc(&device, bytes == 0 ? 1 : bytes), "cudaMalloc");
    regions_.push_back(Region{const_cast<void*>(host), device, bytes, is_output});
    check_cuda(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
    return device;
}

void DeviceMirror::copy_outputs_back() {
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize after the call");
    for (const Region& r : regions_)
        if (r.is_output)
            check_cuda(cudaMemcpy(r.host, r.device, r.bytes, cudaMemcpyDeviceToHost), "cudaMemcpy to host");
}

#else

DeviceMirror::~DeviceMirror() = default;

void* DeviceMirror::mirror(const void*, size_t, bool) {
    throw std::runtime_error("the test suite was built without CUDA (FLASHATTN_TESTS_WITH_CUDA=0)");
}

void DeviceMirror::copy_outputs_back() {}

#endif

} // namespace flashattn::testing
