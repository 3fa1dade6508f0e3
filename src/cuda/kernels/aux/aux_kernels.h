// Helpers around the forward kernel: staging of layouts it cannot read directly, and the slow,
// simple attention-probabilities path used by tests.
#pragma once

#include "kernels/fwd_args.h"

#include <cuda_runtime.h>

#include <cstdint>

namespace flashattn::cuda {

// A (batch, rows, heads, cols) view of 16-bit elements with element strides; cols contiguous.
struct StridedView {
    void* data;
    int64_t batch_stride, row_stride, head_stride;
};

// dst (batch, rows, heads, padded_cols), contiguous, = src with columns [cols, padded_cols) zeroed.
void pack_padded(StridedView src, void* dst, int64_t batch, int64_t rows, int64_t heads, int cols, int padded_cols,
                 cudaStream_t stream);

// dst (strided) = the first `cols` columns of src (batch, rows, heads, padded_cols), contiguous.
void unpack_padded(const void* src, StridedView dst, int64_t batch, int64_t rows, int64_t heads, int cols,
                   int padded_cols, cudaStream_t stream);

// attn_probs (batch, heads, seqlen_q, seqlen_k), fp32: the normalised probabilities of a finished
// forward (args.lse must hold its lse), negated where dropout dropped them, 0 outside the mask
// and the sequence. Recomputes each score with an fp32 dot product: O(N^2 d), for tests.
void write_attn_probs(const FwdArgs& args, fa_dtype dtype, float* attn_probs, cudaStream_t stream);

// words[0, count) = 0 by a one-CTA kernel that lets the next kernel in the stream launch at once
// (dependent_launch.h): that kernel, launched as its programmatic dependent, overlaps its start-up
// with this one and waits for it only where it reads the words. A memset in its place costs its
// own execution and the next kernel's whole launch latency (~2 us on the H200: ~1% of a 1k-token
// causal d128 forward).
void clear_for_dependent(unsigned* words, int count, cudaStream_t stream);

} // namespace flashattn::cuda
