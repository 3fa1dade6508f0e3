// The forward's inference path on CUDA (issue 6): paged K/V, KV-cache addressing, split-KV with its
// combine, packed GQA heads. All of it runs on the SM80 kernel's inference variant, on every
// architecture (the Hopper kernel reads plain K/V rows only).
#pragma once

#include "fwd_args.h"

#include "core/problem.h"

#include <cuda_runtime.h>

namespace flashattn::cuda {

// Runs `problem` on the inference variant and returns true, or returns false without doing anything
// when the ordinary kernels serve it (no block table, no KV cache, and one split: num_splits == 1,
// or 0 and the heuristic chose one). `args` is backend.cu's kernel view of the problem after
// staging (packed copies of odd layouts, the lse buffer attn_probs needs); tile_dim the compiled
// head dim that serves it.
bool run_inference_forward(const Problem& problem, FwdArgs args, int tile_dim, int device, cudaStream_t stream);

} // namespace flashattn::cuda
