// The seam between the CPU backend's plumbing (threads, memory, ISA choice: backend.cpp) and its
// kernels, which are compiled once per instruction set (isa/*.cpp).
//
// The kernel builds receive everything through this interface on purpose: they must not
// instantiate std:: templates (containers, std::function, atomics), because an inline function
// compiled for AVX-512 in one object and for SSE2 in another is the "same" function to the linker,
// which keeps one of the two copies, possibly the AVX-512 one for a machine without it.
#pragma once

#include "core/problem.h"

#include <cstddef>
#include <cstdint>

namespace flashattn::cpu {

// Threads and memory for one API call.
class Executor {
public:
    using TaskFn = void (*)(void* context, int64_t task, int worker);

    virtual int workers() const = 0;
    // Calls fn(context, task, worker) for every task in [0, num_tasks), in parallel, tasks handed
    // out in increasing order; worker in [0, workers()) tells which per-thread scratch to use.
    virtual void parallel_for(int64_t num_tasks, TaskFn fn, void* context) = 0;
    // Uninitialised, 64-byte aligned memory that lives until the API call returns.
    virtual void* allocate(size_t bytes) = 0;

protected:
    ~Executor() = default;
};

// Block sizes; 0 = the kernel build's default for the problem. Overridable for tuning through the
// overrides' cpu_blocks=FQxFKxBQxBK (core/overrides.h).
struct Tuning {
    int fwd_block_q = 0, fwd_block_k = 0;
    int bwd_block_q = 0, bwd_block_k = 0;
};

// What each ISA build of the kernels exports.
struct KernelSet {
    const char* isa; // "generic", "avx2", "avx512"
    int vector_bytes;
    void (*forward)(const Problem& problem, const Tuning& tuning, Executor& executor);
    void (*backward)(const BwdProblem& problem, const Tuning& tuning, Executor& executor);
};

namespace generic { extern const KernelSet kernels; }
#if defined(FLASHATTN_CPU_X86)
namespace avx2 { extern const KernelSet kernels; }
namespace avx512 { extern const KernelSet kernels; }
#endif

} // namespace flashattn::cpu
