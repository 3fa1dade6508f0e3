// Per-CTA event times of the Hopper backward (bwd_kernel_sm90.cuh), to see where a key block's time
// goes when a CTA walks few query blocks (at 1k tokens each CTA pays ~17-21 us beyond its blocks'
// share, docs/perf-log.md, session 6). Compiled in only with the CMake option
// FLASHATTN_CUDA_BWD_TIMELINE (a measuring build: the marks cost registers and stores); backend.cu
// then fills BwdArgs::timeline when $FLASHATTN_CUDA_BWD_TIMELINE_FILE names a CSV to write, and
// bench/bwd_timeline.py reads it. One thread of each role writes: consumer thread 0 (the CTA's
// thread kProducerThreads) and producer thread 0, the first key block of the CTA only.
#pragma once

#include "bwd_args.h"

#include <cstdint>

namespace flashattn::cuda::kernels {

// Slots per CTA (BwdArgs::timeline[cta * kBwdTimelineSlots + slot]). Clock slots are the SM's
// cycle counter (clock64: comparable within a CTA), global slots %globaltimer in ns (comparable
// across SMs; bench/bwd_timeline.py converts cycles with each CTA's own ratio).
enum BwdTimelineSlot : int {
    kTimelineSmid = 0,         // the SM the CTA ran on
    kTimelineGlobalStart,      // consumers start (after setmaxnreg), ns
    kTimelineGlobalEnd,        // consumers done with the first key block's epilogue, ns
    kTimelineStart,            // consumers start, cycles
    kTimelineKvReady,          // first key block's K, V landed (kv_full)
    kTimelineFirstScores,      // first query block's S^T completed (its Q stage landed, then the wgmma)
    kTimelineBlocksDone,       // last query block of the first key block done (before the epilogue)
    kTimelineEpilogueDone,     // dK, dV of the first key block stored
    kTimelineProducerStart,    // producer: entered its loop (after setmaxnreg and its address set-up)
    kTimelineProducerKvIssued, // producer: K, V of the first key block issued
    kTimelineProducerIssued,   // producer: K, V and the first Q stage of the first key block issued
    kTimelineProducerExit,     // producer: its last dQ add issued and its copies landed
    kBwdTimelineSlots
};

#if FLASHATTN_CUDA_BWD_TIMELINE
__device__ __forceinline__ uint64_t timeline_clock() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t));
    return t;
}
__device__ __forceinline__ uint64_t timeline_globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ uint32_t timeline_smid() {
    uint32_t id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}
#endif

// Records `slot` for this CTA if `writer` (the caller's chosen thread) and a timeline was given.
__device__ __forceinline__ void timeline_mark(const BwdArgs& args, BwdTimelineSlot slot, bool writer) {
#if FLASHATTN_CUDA_BWD_TIMELINE
    if (!writer || args.timeline == nullptr) return;
    uint64_t* const cta = args.timeline + uint64_t(blockIdx.x) * kBwdTimelineSlots;
    if (slot == kTimelineGlobalStart || slot == kTimelineGlobalEnd) {
        cta[slot] = timeline_globaltimer();
    } else if (slot == kTimelineSmid) {
        cta[slot] = timeline_smid();
    } else {
        cta[slot] = timeline_clock();
    }
#else
    (void)args;
    (void)slot;
    (void)writer;
#endif
}

} // namespace flashattn::cuda::kernels
