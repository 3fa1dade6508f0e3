// Where a row of one sequence's K or V lives in a paged pool: row r (counted from the sequence's
// first table entry) is row r % page_size of block table_row[r / page_size]. Every kernel that
// reads or writes paged K/V (the inference kernels, the KV-cache append) finds its rows here.
//
// The table lives in device memory the host never read: an entry outside [0, num_blocks) reads
// block 0 instead (inside the pool) and sets `faulted`; the kernel then writes NaN for the sequence
// (and the append skips the row) and, where the warp may diverge, report() records the fault
// (device_faults.h). The lookup itself has no branch: a call or a divergent path here, between a
// warp's ldmatrix and mma instructions, would leave the warp diverged where they need all lanes.
#pragma once

#include "device/device_faults.h"

#include <cstdint>

namespace flashattn::cuda::kernels {

struct PageSlot {
    int32_t block;
    uint32_t row; // within the block
};

struct PageTable {
    const int32_t* table_row; // this sequence's row of the block table
    uint32_t page_size;
    int32_t num_blocks;
    bool faulted = false;
    int32_t bad_page = 0, bad_entry = 0;

    // The pool block of page `page` of the sequence.
    __device__ __forceinline__ int32_t block(uint32_t page) {
        const int32_t entry = table_row[page];
        const bool ok = uint32_t(entry) < uint32_t(num_blocks);
        bad_page = ok ? bad_page : int32_t(page);
        bad_entry = ok ? bad_entry : entry;
        faulted |= !ok;
        return ok ? entry : 0;
    }
    // Where the sequence's row `row` lives.
    __device__ __forceinline__ PageSlot slot(uint32_t row) { return {block(row / page_size), row % page_size}; }

    // Records this thread's fault, if it met one.
    __device__ __forceinline__ void report(DeviceFault* fault, int sequence) const {
        if (faulted) record_fault(fault, FaultArg::block_table, sequence, bad_page, bad_entry, 0, num_blocks - 1);
    }
};

} // namespace flashattn::cuda::kernels
