// The device as the planner sees it (host/planner.h's DeviceInfo), read from the runtime once per
// device: compute capability, SM count, the tile head dims and architectures this build compiled,
// and the occupancy of the inference kernels (the split rules size their waves with it).
#pragma once

#include "host/planner.h"

namespace flashattn::cuda {

const DeviceInfo& device_info(int device);

} // namespace flashattn::cuda
