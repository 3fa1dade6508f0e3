// Portable build of the CPU kernels: 16-byte vectors, the baseline of every x86-64 CPU (SSE2) and
// of AArch64 (NEON). Runs anywhere; the backend prefers the wider builds when the CPU has them.
#include "cpu/kernels/prelude.h"

#define FA_CPU_ISA generic
#define FA_CPU_VECTOR_BYTES 16
#define FA_CPU_TILE_ROWS 6
#define FA_CPU_TILE_VECTORS 2
#include "cpu/kernels/kernel_set.inc"
