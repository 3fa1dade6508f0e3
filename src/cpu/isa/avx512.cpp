// AVX-512 build of the CPU kernels (Intel Skylake-SP, AMD Zen 4 and later): 16-lane vectors,
// 12 x 32 register tiles using 27 of the 32 zmm registers. Same source as every other build.
#include "cpu/kernels/prelude.h"

#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma")
#endif

#define FA_CPU_ISA avx512
#define FA_CPU_VECTOR_BYTES 64
#define FA_CPU_TILE_ROWS 12
#define FA_CPU_TILE_VECTORS 2
#include "cpu/kernels/kernel_set.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
