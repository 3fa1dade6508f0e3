// Everything a kernel build includes from outside the kernels, included BEFORE the ISA target is
// switched on (see isa/*.cpp): the inline functions of these headers are thereby compiled for the
// baseline ISA, so whichever copy the linker keeps runs on every CPU. The kernel headers that
// follow include nothing themselves.
#pragma once

#include "core/dtype.h"
#include "core/problem.h"
#include "cpu/executor.h"

#include <flashattn/philox.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#define FA_INLINE inline __attribute__((always_inline))
