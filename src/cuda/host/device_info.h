// The device as the planner sees it (host/planner.h's DeviceInfo), read from the runtime once per
// device: compute capability, SM count, the tile head dims and architectures this build compiled,
// and the occupancy of the inference kernels (the split rules size their waves with it).
#pragma once

#include "host/planner.h"

namespace flashattn::cuda {

// Per-device tables (this DeviceInfo, the fault records) hold this many devices.
constexpr int kMaxDevices = 64;
// Refuses a device ordinal past the per-device tables (FA_ERROR_UNSUPPORTED).
void require_device_in_tables(int device);

const DeviceInfo& device_info(int device);

} // namespace flashattn::cuda
