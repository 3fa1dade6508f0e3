// From a run-time tile head dim to the compile-time one of the kernels this build compiled
// (FLASHATTN_HEADDIMS, build_config.h): fn(std::integral_constant<int, D>{}) for D == tile_dim.
// Every entry point (forward, backward, inference) dispatches through this one switch.
#pragma once

#include "build_config.h"

#include "core/error.h"

#include <type_traits>

namespace flashattn::cuda {

template <typename Fn>
auto with_tile_dim(int tile_dim, const char* what, Fn&& fn) {
    switch (tile_dim) {
#ifdef FLASHATTN_CUDA_HDIM_32
        case 32: return fn(std::integral_constant<int, 32>{});
#endif
#ifdef FLASHATTN_CUDA_HDIM_64
        case 64: return fn(std::integral_constant<int, 64>{});
#endif
#ifdef FLASHATTN_CUDA_HDIM_96
        case 96: return fn(std::integral_constant<int, 96>{});
#endif
#ifdef FLASHATTN_CUDA_HDIM_128
        case 128: return fn(std::integral_constant<int, 128>{});
#endif
#ifdef FLASHATTN_CUDA_HDIM_192
        case 192: return fn(std::integral_constant<int, 192>{});
#endif
#ifdef FLASHATTN_CUDA_HDIM_256
        case 256: return fn(std::integral_constant<int, 256>{});
#endif
    }
    fail(FA_ERROR_INTERNAL, "no ", what, " kernel for tile head dim ", tile_dim);
}

} // namespace flashattn::cuda
