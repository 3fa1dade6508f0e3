// Faults in index arrays that live in device memory (docs/semantics.md, "Indices in device memory").
//
// The host never reads cu_seqlens, seqused_k, a KV cache's arrays or a block table that lives on
// the GPU: that would synchronise every call, decode steps included. The kernels read them, and
// every value is clamped into its valid range before it addresses memory, so a malformed array can
// never send an access outside the tensors or kill the CUDA context. A value outside its range is a
// fault: the kernel that reads it records the first one of the device here (which argument, which
// sequence, what it read, what was allowed), the attention outputs of the affected sequence are NaN,
// no appended cache row goes where the value points, and the caller hears of it from
// fa_check_device_faults, at a synchronisation point of its choice.
#pragma once

#include <cstdint>

namespace flashattn::cuda {

enum class FaultArg : int32_t {
    none = 0,
    cu_seqlens_q,
    cu_seqlens_k,
    seqused_k,
    cache_seqlens,
    cache_leftpad,
    cache_batch_idx,
    block_table,
};

// One per device. `arg` is written last (FaultArg::none: no fault since the last check; -1: a
// kernel is writing the others).
struct DeviceFault {
    int32_t arg;
    int32_t sequence;  // the batch index b the value belongs to
    int32_t column;    // block_table: the entry's column; cu_seqlens: the element index; else 0
    int32_t value;     // what the kernel read
    int64_t low, high; // the valid range, inclusive
};

#if defined(__CUDACC__)
// Keep the first fault since the last check. Out of line, so that the never-taken fault paths cost
// the kernels one call instruction each instead of their code in the instruction stream. Callers
// reach it from warp-uniform branches (sequence bounds) or after their last warp-wide instruction
// (PageTable::report): a call from a lane-divergent branch could leave the warp diverged at the next
// ldmatrix or mma.
static __device__ __noinline__ void record_fault(DeviceFault* fault, FaultArg arg, int sequence, int column,
                                                 int value, int64_t low, int64_t high) {
    if (fault == nullptr || atomicCAS(&fault->arg, 0, -1) != 0) return;
    fault->sequence = sequence;
    fault->column = column;
    fault->value = value;
    fault->low = low;
    fault->high = high;
    __threadfence();
    atomicExch(&fault->arg, int32_t(arg));
}

// value, clamped into [low, high]; out of it, the fault is recorded and `faulted` set.
__device__ __forceinline__ int64_t checked_index(DeviceFault* fault, bool& faulted, FaultArg arg, int sequence,
                                                 int column, int64_t value, int64_t low, int64_t high) {
    if (value >= low && value <= high) return value;
    faulted = true;
    record_fault(fault, arg, sequence, column, int(value), low, high);
    return value < low ? low : high;
}
#endif

// The device's fault record (device memory, zero until a fault), for the kernels' arguments.
DeviceFault* device_fault_record(int device);

} // namespace flashattn::cuda
