// The forward's inference path on CUDA (issue 6): paged K/V, KV-cache addressing, split-KV with its
// combine, packed GQA heads. All of it runs on the SM80 kernel's inference variant, on every
// architecture (the Hopper kernel reads plain K/V rows only).
#pragma once

#include "device_scope.h"
#include "fwd_args.h"
#include "inference_launch.h"

#include "core/problem.h"

#include <cuda_runtime.h>

namespace flashattn::cuda {

// How the inference variant runs a problem, decided from the problem and the device alone, so that
// a workspace size query (fa_kvcache_workspace_size) and the call agree.
struct InferencePlan {
    bool runs = false; // false: the ordinary kernels serve it (no block table, no KV cache, and one
                       // split: num_splits == 1, or 0 and the heuristic chose one)
    int device = -1;
    bool pack_gqa = false;
    InferenceSchedule schedule = InferenceSchedule::pipelined;
    InferenceTiling tiling{};
    int splits = 1;
    bool prefetch_pages = false; // paged, at most one CTA per SM: see plan_inference
    size_t partial_out_bytes = 0, partial_lse_bytes = 0; // split-KV's fp32 partials (0: none)
};

// head_dim: the head dim the kernel reads (padded to a multiple of 8); tile_dim: the compiled head
// dim that serves it.
InferencePlan plan_inference(const Problem& problem, int head_dim, int tile_dim, int device);

// Runs a planned problem (plan.runs) with the partials from `workspace`. `args` is backend.cu's
// kernel view of the problem after staging (packed copies of odd layouts, the lse attn_probs needs).
void run_inference_forward(const Problem& problem, const InferencePlan& plan, FwdArgs args, int tile_dim,
                           Workspace& workspace, cudaStream_t stream);

} // namespace flashattn::cuda
