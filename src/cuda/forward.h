// The CUDA forward with its scratch memory from a Workspace (backend.cu): planned first, so that a
// workspace size query, the check of a caller's workspace and the call itself share one plan.
// fa_forward / fa_forward_with_workspace plan and run in backend.cu; fa_kvcache_forward (kvcache.cu)
// plans the attention before it appends, so that a workspace too small is refused first.
#pragma once

#include "device_scope.h"
#include "inference.h"

#include "core/problem.h"

#include <cstddef>

namespace flashattn::cuda {

// Everything a forward call takes from its workspace, decided once from the problem and the device
// (as BwdPlan for the backward): packed, zero-padded copies of the layouts the kernel cannot read in
// 16-byte chunks, the lse attn_probs is derived from when the caller asked for none, and split-KV's
// partials (InferencePlan).
struct FwdPlan {
    int device = -1; // -1: nothing to compute (no query row)
    int cc_major = 0, cc_minor = 0;
    bool pad_head_dim = false;
    int padded_dim = 0, tile_dim = 0;
    int64_t dense_batch = 0, q_rows = 0; // q and out as the kernel sees them
    int64_t kv_batch = 0, k_rows = 0;    // K/V as stored: a paged pool, a KV cache's entries, or the sequences' rows
    bool kv_has_batch = false;           // a pool's blocks are its batch entries, varlen or not
    bool stage_q = false, stage_k = false, stage_v = false, stage_out = false;
    size_t q_bytes = 0, k_bytes = 0, v_bytes = 0, out_bytes = 0, lse_bytes = 0;
    InferencePlan inference;

    // The workspace bytes the call takes (0 when it stages nothing and does not split the keys).
    size_t bytes() const {
        size_t total = 0;
        for (size_t b : {q_bytes, k_bytes, v_bytes, out_bytes, lse_bytes, inference.partial_out_bytes,
                         inference.partial_lse_bytes})
            total += Workspace::piece(b);
        return total;
    }
};

// The plan of `problem` on `device` (where its tensors are), after refusing a dtype, device or
// problem size the kernels cannot run. Reads the tensors' strides and address alignment, not
// their contents.
FwdPlan plan_forward(const Problem& problem, int device);

// Runs `problem` as planned, its scratch taken from `workspace`.
void forward(const Problem& problem, const FwdPlan& plan, Workspace& workspace);

} // namespace flashattn::cuda
