// CUDA runtime failures as flashattn errors: FA_ERROR_DEVICE (or FA_ERROR_OUT_OF_MEMORY) with the
// runtime's own words and what we were doing.
#pragma once

#include "core/error.h"

#include <cuda_runtime.h>

namespace flashattn::cuda {

template <typename... What>
void check_cuda(cudaError_t status, const What&... what) {
    if (status == cudaSuccess) return;
    (void)cudaGetLastError(); // clear a non-sticky error so the next call starts clean
    fail(status == cudaErrorMemoryAllocation ? FA_ERROR_OUT_OF_MEMORY : FA_ERROR_DEVICE, what..., ": ",
         cudaGetErrorName(status), " (", cudaGetErrorString(status), ")");
}

} // namespace flashattn::cuda
