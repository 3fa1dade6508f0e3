// The fault record of each device (device_faults.h) and fa_check_device_faults.
#include "device/device_faults.h"

#include "host/cuda_check.h"
#include "host/device_info.h"
#include "host/device_scope.h"

#include "core/backend.h"
#include "core/error.h"

#include <cuda_runtime.h>

#include <atomic>

namespace flashattn::cuda {
namespace {

// A module-scope variable: one per device context, zero when the module loads, so that a call
// allocates nothing for it (a cudaMalloc would be refused inside CUDA-graph capture).
__device__ DeviceFault g_device_fault;

std::atomic<DeviceFault*> g_records[kMaxDevices];

const char* argument_name(FaultArg arg) {
    switch (arg) {
        case FaultArg::cu_seqlens_q: return "cu_seqlens_q";
        case FaultArg::cu_seqlens_k: return "cu_seqlens_k";
        case FaultArg::seqused_k: return "seqused_k";
        case FaultArg::cache_seqlens: return "cache_seqlens";
        case FaultArg::cache_leftpad: return "cache_leftpad";
        case FaultArg::cache_batch_idx: return "cache_batch_idx";
        case FaultArg::block_table: return "block_table";
        default: return "an index array";
    }
}

} // namespace

DeviceFault* device_fault_record(int device) {
    require_device_in_tables(device);
    DeviceFault* record = g_records[device].load(std::memory_order_acquire);
    if (record == nullptr) {
        DeviceGuard guard(device);
        void* address = nullptr;
        check_cuda(cudaGetSymbolAddress(&address, g_device_fault), "finding the device's fault record");
        record = static_cast<DeviceFault*>(address);
        g_records[device].store(record, std::memory_order_release);
    }
    return record;
}

void check_device_faults(int device, void* stream_handle) {
    int count = 0;
    check_cuda(cudaGetDeviceCount(&count), "counting CUDA devices");
    require(device >= 0 && device < count, "device must be a CUDA device ordinal in [0, ", count, "), got ", device);
    DeviceGuard guard(device);
    const auto stream = static_cast<cudaStream_t>(stream_handle);
    DeviceFault* const record = device_fault_record(device);
    DeviceFault fault{};
    check_cuda(cudaMemcpyAsync(&fault, record, sizeof fault, cudaMemcpyDeviceToHost, stream), "reading the fault record");
    check_cuda(cudaStreamSynchronize(stream), "waiting for the stream");
    if (fault.arg == int32_t(FaultArg::none)) return;
    check_cuda(cudaMemsetAsync(record, 0, sizeof fault, stream), "clearing the fault record");
    check_cuda(cudaStreamSynchronize(stream), "waiting for the stream");
    const auto arg = FaultArg(fault.arg);
    const char* name = argument_name(arg);
    // Which element: cu_seqlens by position, a block table by (sequence, column), the rest by sequence.
    std::string element = std::string(name) + "[";
    if (arg == FaultArg::cu_seqlens_q || arg == FaultArg::cu_seqlens_k) element += std::to_string(fault.column) + "]";
    else if (arg == FaultArg::block_table) element += std::to_string(fault.sequence) + "][" + std::to_string(fault.column) + "]";
    else element += std::to_string(fault.sequence) + "]";
    const char* why = arg == FaultArg::cache_seqlens ? " (the cache's capacity minus seqlen_new; with a block_table the "
                                                       "capacity is max_blocks_per_seq * page_size)"
                      : arg == FaultArg::block_table ? " (a block index below num_blocks)"
                      : arg == FaultArg::cache_leftpad ? " (at most the sequence's cache_seqlens)"
                                                       : "";
    fail(FA_ERROR_INVALID_ARGUMENT, "a kernel on CUDA device ", device, " read ", element, " = ", fault.value,
         ", outside its valid range [", fault.low, ", ", fault.high, "]", why, ". It was clamped into that range, "
         "sequence ", fault.sequence, "'s attention output and lse are NaN, and no appended row went where it points "
         "(docs/semantics.md, \"Indices in device memory\"). This reports the first such value since the last check.");
}

} // namespace flashattn::cuda
