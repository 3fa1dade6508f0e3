// The launchers of the forward kernel's inference variant (paged K/V, KV cache, split-KV, packed
// GQA heads): one instantiation per (head dim, dtype), generated from
// instances/fwd_inference_instance.cu.in. inference.cu plans a call with them.
#pragma once

#include "fwd_args.h"

#include <cuda_runtime.h>

namespace flashattn::cuda {

// The inference variant's tile and K/V load schedule (kernels/fwd_traits.cuh):
//   pipelined      64 query rows, 4 warps, a ring of K/V stages (several blocks in flight);
//   narrow         16 query rows, 1 warp, a ring: decode tiles (packed GQA heads or a few query rows)
//                  fill at most 16 rows, and the 64-row tile spent 3/4 of its MMAs and softmax on
//                  empty rows while the kernel should be bound by reading K and V;
//   single_buffer  the 64-row tile with single K and V buffers, the schedule before the ring, kept
//                  so that one build can time them all (FLASHATTN_CUDA_DECODE, inference.cu);
//   split_keys     16 query rows, 4 warps that split the CTA's K/V blocks between them, each with its
//                  own ring, merged at the end (kernels/fwd_decode_kernel.cuh): two CTAs per SM;
//   split_keys_deep  the same with deeper rings, one CTA per SM.
enum class InferenceSchedule { pipelined, narrow, single_buffer, split_keys, split_keys_deep };

// Whether a schedule runs the split-keys decode kernel.
constexpr bool splits_keys(InferenceSchedule s) {
    return s == InferenceSchedule::split_keys || s == InferenceSchedule::split_keys_deep;
}

// The variant's tile and how many of its CTAs one SM holds at once (for the split-KV heuristic).
struct InferenceTiling {
    int block_m, block_n, ctas_per_sm;
};

template <int kHeadDim, fa_dtype kDtype, InferenceSchedule kSchedule>
InferenceTiling inference_tiling();

// Launches it. args.num_splits (>= 1), args.pack_gqa and, with splits, the fp32 accumulators are
// already set; num_m_blocks is set here.
template <int kHeadDim, fa_dtype kDtype, InferenceSchedule kSchedule>
void run_fwd_inference(FwdArgs args, cudaStream_t stream);

} // namespace flashattn::cuda
