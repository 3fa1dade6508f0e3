// AVX2 + FMA build of the CPU kernels (Intel Haswell, AMD Zen and later): 8-lane vectors, 6 x 16
// register tiles. Only the code below the target switch is compiled for AVX2 (see prelude.h).
#include "cpu/kernels/prelude.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif

#define FA_CPU_ISA avx2
#define FA_CPU_VECTOR_BYTES 32
#define FA_CPU_TILE_ROWS 6
#define FA_CPU_TILE_VECTORS 2
#include "cpu/kernels/kernel_set.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
