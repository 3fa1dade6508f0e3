// The inference path on the CPU around the forward kernel (inference.cpp): appending to a KV cache,
// rotating queries, merging split results.
#pragma once

#include "core/problem.h"
#include "executor.h"

namespace flashattn::cpu {

// Writes k_new (rotated when rotary is on) and v_new into the caches at rows cache_seqlens[b] + i.
void append_to_cache(const KvCacheProblem& problem, Executor& executor);

// The attention to run after appending: problem.attention, with q replaced by a rotated copy when
// rotary is on (rounded to the dtype, in memory from the executor).
Problem attention_with_rotated_queries(const KvCacheProblem& problem, Executor& executor);

// fa_combine.
void combine_partials(const CombineProblem& problem, Executor& executor);

} // namespace flashattn::cpu
