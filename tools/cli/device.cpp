// The host "device": the CPU backend reads and writes ordinary memory, timed with a steady clock.
#include "device.h"

#include "errors.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

namespace flashattn::cli {
namespace {

class CpuDevice final : public Device {
public:
    fa_backend backend() const override { return FA_BACKEND_CPU; }
    std::string description() const override {
        const int threads = fa_get_num_threads();
        return "cpu, " + std::to_string(threads) + (threads == 1 ? " thread" : " threads");
    }
    void* allocate(size_t bytes) override {
        void* data = std::calloc(bytes, 1);
        if (!data) throw std::bad_alloc();
        return data;
    }
    void release(void* data) override { std::free(data); }
    void upload(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
    void download(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
    double time_ms(const std::function<void()>& work) override {
        const auto start = std::chrono::steady_clock::now();
        work();
        return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    }
};

} // namespace

std::unique_ptr<Device> make_cpu_device() { return std::make_unique<CpuDevice>(); }

#if !defined(FLASHATTN_WITH_CUDA)
std::unique_ptr<Device> make_cuda_device() {
    throw UsageError("--backend cuda: this build has no CUDA backend (configure with -DFLASHATTN_CUDA=ON on a "
                     "machine with nvcc)");
}
#endif

} // namespace flashattn::cli
