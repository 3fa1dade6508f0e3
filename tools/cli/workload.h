// Problem construction: the host-side inputs of one attention problem (random data in the chosen
// dtype, varlen lengths, ALiBi slopes) and the fa_fwd_params / fa_bwd_params that point at one copy
// of them, host or device. Tensors are contiguous (batch, seqlen, heads, head_dim), or packed
// (total_rows, heads, head_dim) for varlen: the layout the reference returns its results in.
#pragma once

#include "options.h"

#include "core/problem.h"

#include <flashattn/flashattn.h>

#include <cstdint>
#include <vector>

namespace flashattn::cli {

// A contiguous (rows, heads, head_dim) tensor in host memory, stored in its dtype.
struct HostTensor {
    fa_dtype dtype = FA_BFLOAT16;
    int64_t rows = 0, heads = 0, head_dim = 0;
    std::vector<unsigned char> bytes;

    HostTensor() = default;
    HostTensor(fa_dtype dtype, int64_t rows, int64_t heads, int64_t head_dim);
    int64_t elements() const { return rows * heads * head_dim; }
    float value(int64_t index) const;
};

struct Workload {
    ProblemSpec spec;
    std::vector<int32_t> cu_seqlens_q, cu_seqlens_k; // varlen only: batch + 1 prefix sums
    int64_t q_rows = 0, k_rows = 0;                   // rows of q/out and k/v (all batches, or packed)
    HostTensor q, k, v, dout;                         // dout only when a backward will run
    std::vector<float> alibi_slopes;                  // (heads) when --alibi
    std::vector<float> learnable_sink;                // (heads) when --learnable-sink
    int64_t lse_elements = 0;
};

// Standard normal values (like torch.randn), rounded to the tensor's dtype; the values depend only
// on (seed, stream).
void fill_normal(HostTensor& t, uint64_t seed, uint64_t stream);

// The value head dim of a problem: --head-dim-v, or --head-dim.
inline int value_head_dim(const ProblemSpec& s) { return s.head_dim_v > 0 ? s.head_dim_v : s.head_dim; }
// --learnable-sink's logits: (heads) standard normal fp32 values from (seed, stream).
std::vector<float> random_sinks(const ProblemSpec& s, uint64_t stream);

// Builds the inputs; throws UsageError if they would not fit in memory.
Workload make_workload(const ProblemSpec& spec, bool with_backward);

// Where one copy of a workload's tensors lives (host or device memory).
struct Bindings {
    void *q = nullptr, *k = nullptr, *v = nullptr, *out = nullptr;
    float* lse = nullptr;
    const int32_t *cu_seqlens_q = nullptr, *cu_seqlens_k = nullptr;
    const float* alibi_slopes = nullptr;
    void *dout = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
    const float* learnable_sink = nullptr;
    float* dsink = nullptr;
};

// Host copies of everything the library writes (filled by the runner, read by the checker).
struct Outputs {
    HostTensor out;
    std::vector<float> lse;
    HostTensor dq, dk, dv; // only when a backward runs
    std::vector<float> dsink; // with a backward and --learnable-sink
};

Outputs make_outputs(const Workload& work, bool with_backward);
Bindings host_bindings(Workload& work, Outputs& outputs);

fa_fwd_params forward_params(const Workload& work, const Bindings& at, fa_backend backend);
fa_bwd_params backward_params(const Workload& work, const Bindings& at, fa_backend backend, bool deterministic);

// The library's own reading of the problem (mask, spans, scale), built from host-memory bindings.
Problem host_problem(const Workload& work, const Bindings& host);

// Query-key pairs the mask allows, over every sequence and head.
int64_t allowed_pairs(const Problem& problem);

} // namespace flashattn::cli
