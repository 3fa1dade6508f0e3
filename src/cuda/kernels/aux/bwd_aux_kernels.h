// The small kernels around the backward's main kernel: dsum before it, the fp32 -> output sums after.
#pragma once

#include "kernels/bwd_args.h"

#include <cuda_runtime.h>

namespace flashattn::cuda {

// dsum[lse index] = sum over the real head dim of dO * O (fp32), for every query row of every
// sequence. Reads dout and fwd.out with any strides. Also zeroes the row's dQ scratch (every chunk's
// buffer) and, with the ordered dQ, the counter of each query block at its first row: the main
// kernel only adds to the rows of sequences, which are exactly the rows visited here, so no
// separate memset pass over the scratch is needed.
void bwd_dsum(const BwdArgs& args, fa_dtype dtype, cudaStream_t stream);

// dq = dq_scale * (sum of the chunks' dQ scratch, in chunk order), and, when the main kernel left
// them in fp32 scratch, dk / dv = sum of each KV head's query heads in head order. Any output
// strides; only rows of sequences are written.
void bwd_finish(const BwdArgs& args, fa_dtype dtype, cudaStream_t stream);

} // namespace flashattn::cuda
