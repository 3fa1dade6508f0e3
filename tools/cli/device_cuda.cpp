// The CUDA device: cudaMalloc'd tensors, copies over PCIe/NVLink, and CUDA events on the default
// stream (the stream the library runs on when params.stream is NULL) so only GPU time is measured.
// Built only when the library has the CUDA backend; plain C++ against the CUDA runtime, no nvcc.
#include "device.h"

#include "errors.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

namespace flashattn::cli {
namespace {

void check_cuda(cudaError_t status, const char* what) {
    if (status != cudaSuccess)
        throw std::runtime_error(std::string(what) + " failed: " + cudaGetErrorName(status) + ": " +
                                 cudaGetErrorString(status));
}

class CudaDevice final : public Device {
public:
    CudaDevice() {
        check_cuda(cudaGetDevice(&device_), "cudaGetDevice");
        cudaDeviceProp properties{};
        check_cuda(cudaGetDeviceProperties(&properties, device_), "cudaGetDeviceProperties");
        name_ = properties.name;
        check_cuda(cudaEventCreate(&start_), "cudaEventCreate");
        check_cuda(cudaEventCreate(&stop_), "cudaEventCreate");
    }
    ~CudaDevice() override {
        cudaEventDestroy(start_);
        cudaEventDestroy(stop_);
    }

    fa_backend backend() const override { return FA_BACKEND_CUDA; }
    std::string description() const override { return "cuda, " + name_ + " (device " + std::to_string(device_) + ")"; }
    void* allocate(size_t bytes) override {
        void* data = nullptr;
        const cudaError_t status = cudaMalloc(&data, bytes);
        if (status == cudaErrorMemoryAllocation) {
            cudaGetLastError(); // clear it: the process can go on
            throw UsageError("not enough GPU memory for a " + std::to_string(bytes >> 20) +
                             " MiB tensor; reduce --batch, --seqlen or --heads");
        }
        check_cuda(status, "cudaMalloc");
        check_cuda(cudaMemset(data, 0, bytes), "cudaMemset");
        return data;
    }
    void release(void* data) override { cudaFree(data); }
    void upload(void* dst, const void* src, size_t bytes) override {
        check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (host to device)");
    }
    void download(void* dst, const void* src, size_t bytes) override {
        check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy (device to host)");
    }
    double time_ms(const std::function<void()>& work) override {
        check_cuda(cudaEventRecord(start_, nullptr), "cudaEventRecord");
        work();
        check_cuda(cudaEventRecord(stop_, nullptr), "cudaEventRecord");
        check_cuda(cudaEventSynchronize(stop_), "cudaEventSynchronize (a kernel failed)");
        float ms = 0.0f;
        check_cuda(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
        return ms;
    }

private:
    int device_ = 0;
    std::string name_;
    cudaEvent_t start_{}, stop_{};
};

} // namespace

std::unique_ptr<Device> make_cuda_device() {
    if (!fa_cuda_available())
        throw UsageError("--backend cuda: the CUDA backend is built but no CUDA device is usable here");
    return std::make_unique<CudaDevice>();
}

} // namespace flashattn::cli
