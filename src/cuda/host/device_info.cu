#include "host/device_info.h"

#include "build_config.h"
#include "host/cuda_check.h"
#include "host/device_scope.h"
#include "host/launch.h"
#include "host/tile_dim_dispatch.h"

#include "core/error.h"

#include <array>
#include <memory>
#include <mutex>

namespace flashattn::cuda {
namespace {

DeviceInfo read_device_info(int device) {
    DeviceGuard guard(device);
    DeviceInfo info;
    check_cuda(cudaDeviceGetAttribute(&info.cc_major, cudaDevAttrComputeCapabilityMajor, device), "querying the device");
    check_cuda(cudaDeviceGetAttribute(&info.cc_minor, cudaDevAttrComputeCapabilityMinor, device), "querying the device");
    check_cuda(cudaDeviceGetAttribute(&info.sm_count, cudaDevAttrMultiProcessorCount, device), "querying the device");
    info.sm90_kernels = FLASHATTN_CUDA_HAS_SM90 != 0;
    info.tile_dims = {FLASHATTN_CUDA_HEADDIM_LIST};
    if (info.cc_major >= 8) { // (older devices are refused by the planner; their kernels would not load)
        for (const int tile_dim : info.tile_dims) {
            with_tile_dim(tile_dim, "inference", [&](auto d) {
                info.decode_ctas_per_sm.push_back(decode_ctas_per_sm<decltype(d)::value, FA_BFLOAT16>());
                info.inference_ctas_per_sm.push_back(inference_ctas_per_sm<decltype(d)::value, FA_BFLOAT16>());
            });
        }
    }
    return info;
}

} // namespace

void require_device_in_tables(int device) {
    if (device < 0 || device >= kMaxDevices)
        fail(FA_ERROR_UNSUPPORTED, "CUDA device ", device, ": the CUDA backend supports device ordinals below ",
             kMaxDevices);
}

const DeviceInfo& device_info(int device) {
    static std::array<std::unique_ptr<DeviceInfo>, kMaxDevices> infos;
    static std::mutex mutex;
    require_device_in_tables(device);
    std::lock_guard<std::mutex> lock(mutex);
    if (!infos[size_t(device)]) infos[size_t(device)] = std::make_unique<DeviceInfo>(read_device_info(device));
    return *infos[size_t(device)];
}

} // namespace flashattn::cuda
