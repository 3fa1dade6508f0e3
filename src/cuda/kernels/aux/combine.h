// Merging partial attention results by their logsumexp on the device: the kernel behind fa_combine
// and the last step of split-KV (host/backend.cu). Layouts are explicit element strides.
#pragma once

#include <flashattn/flashattn.h>

#include <cuda_runtime.h>

#include <cstdint>

namespace flashattn::cuda {

struct CombineArgs {
    int32_t num_splits;
    int64_t batch, rows, heads;
    int32_t head_dim;
    const float* partial; // fp32 (split, batch, row, head, head_dim)
    int64_t partial_split_stride, partial_batch_stride, partial_row_stride, partial_head_stride;
    const float* lse_partial; // (split, batch, head, row)
    int64_t lse_split_stride, lse_batch_stride, lse_head_stride, lse_row_stride;
    void* out; // (batch, row, head, head_dim) in out_dtype
    fa_dtype out_dtype;
    int64_t out_batch_stride, out_row_stride, out_head_stride;
    float* lse; // optional (batch, head, row)
    int64_t lse_out_batch_stride, lse_out_head_stride, lse_out_row_stride;
};

// One CTA per (batch, row, head); fp32 arithmetic, out rounded once to its dtype. `dependent`:
// launched as a programmatic dependent of the kernel before it (dependent_launch.h).
// every_split_allocated: every split's partials are written (split-KV's own buffer, an empty split
// as O = 0), so the kernel may load them all before it knows which splits are empty and weigh them
// without a branch (split_kv_combine_kernel, where it applies).
void launch_combine(const CombineArgs& args, cudaStream_t stream, bool dependent, bool every_split_allocated);

} // namespace flashattn::cuda
