// The launchers of the forward kernel's inference variant (paged K/V, KV cache, split-KV, packed
// GQA heads): one instantiation per (head dim, dtype), generated from
// instances/fwd_inference_instance.cu.in. inference.cu plans a call with them.
#pragma once

#include "fwd_args.h"

#include <cuda_runtime.h>

namespace flashattn::cuda {

// How K/V blocks reach shared memory (kernels/fwd_traits.cuh, kKvStages): a ring of stages with
// several blocks in flight (the default), or the earlier single K and V buffers, kept so that one
// build can time both (FLASHATTN_CUDA_DECODE=baseline, inference.cu).
enum class InferenceLoads { pipelined, single_buffer };

// The variant's tile and how many of its CTAs one SM holds at once (for the split-KV heuristic).
struct InferenceTiling {
    int block_m, block_n, ctas_per_sm;
};

template <int kHeadDim, fa_dtype kDtype, InferenceLoads kLoads>
InferenceTiling inference_tiling();

// Launches it. args.num_splits (>= 1), args.pack_gqa and, with splits, the fp32 accumulators are
// already set; num_m_blocks is set here.
template <int kHeadDim, fa_dtype kDtype, InferenceLoads kLoads>
void run_fwd_inference(FwdArgs args, cudaStream_t stream);

} // namespace flashattn::cuda
