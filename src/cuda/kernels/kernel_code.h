// FLASHATTN_KERNEL_CODE: whether this compilation sees the kernels' code (their bodies, the device
// helpers they call and the CuTe objects of their traits), or only what launches them.
//
// An instance unit (instances/*.cu.in) defines FLASHATTN_INSTANCE_UNIT before its includes. Its
// host pass (nvcc's compilation without __CUDA_ARCH__: cudafe++, then the host compiler) needs only
// the launchers, the integer facts of the traits they read (threads, shared memory, tile sizes) and
// each kernel's definition, whose body cudafe++ replaces by a launch stub anyway; so there the
// kernels' code is left out, and with it the parsing of CuTe's atoms and the instantiation of the
// traits' layout algebra: the host pass of a unit goes from ~10 to ~4 CPU-seconds (bwd d128 bf16,
// 2-core machine), its device passes see the same code as before. Every other compilation (the
// device passes; the layout checks in tests/gpu, which run the traits' CuTe layouts on the host)
// sees everything.
//
// The rule for a kernel family's headers: a traits struct keeps what its launcher reads (integer
// facts, computed without CuTe) outside and its CuTe types, and whatever is derived from them, under
// `#if FLASHATTN_KERNEL_CODE`; a kernel header puts its device includes, its device helpers and its
// kernels' bodies there (or under an architecture test such as __CUDA_ARCH_FEAT_SM90_ALL, also false
// in a host pass); the kernels' signatures, with their __launch_bounds__, stay outside. A unit whose
// host pass misses something fails to compile, it cannot compile differently.
#pragma once

#if defined(__CUDA_ARCH__) || !defined(FLASHATTN_INSTANCE_UNIT)
#define FLASHATTN_KERNEL_CODE 1
#else
#define FLASHATTN_KERNEL_CODE 0
// The device passes define CuTe's constants `_` and `product` (__device__ variables there:
// cute/config.hpp, CUTE_INLINE_CONSTANT), which the unit's host code registers by name.
#include <cute/int_tuple.hpp>
#include <cute/underscore.hpp>
#endif
