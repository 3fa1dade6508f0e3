// Overrides: choices the library otherwise makes itself, forced for tests and benchmarks. This is
// the one place where the library reads the environment:
//
//   FLASHATTN_OVERRIDES="forward_kernel=sm80,backward_kernel=sm90,inference_kernel=tile64"
//   FLASHATTN_NUM_THREADS=N      threads of the CPU backend (fa_set_num_threads too)
//
// read once, at the first call; fa_set_overrides(spec) replaces FLASHATTN_OVERRIDES's value at run
// time (same syntax, "" = none). The keys (docs/cuda-backend.md, "Overrides"):
//   forward_kernel    sm80 | sm90            the training forward's kernel on compute capability 9.0
//   backward_kernel   sm80 | sm90            the backward's kernel on compute capability 9.0
//   inference_kernel  tile64 | split_keys    KV-cache, paged and split-KV forwards: the 64-row tile,
//                                            or the split-keys decode kernel for every tile height
//   backward_gqa      kv_major | kv_pairs | scratch   GQA on the Hopper backward: a CTA per KV head
//                                            walking its query heads, one per pair of query heads
//                                            (dK/dV through fp32 scratch per KV head, or per pair in
//                                            deterministic mode), or one per query head with fp32
//                                            dK/dV scratch
//   deterministic_dq  ordered | chunks       deterministic mode's dQ: added in a fixed key-block order
//                                            under per-query-block counters (Hopper kernel only), or
//                                            per-chunk buffers summed in chunk order (either kernel)
//   cpu_isa           generic | avx2 | avx512  the CPU kernels' instruction set (at most the machine's)
//   cpu_blocks        FQxFKxBQxBK           the CPU backend's forward / backward tiles (query x key)
// A forced choice the problem cannot take is refused with the reason, as the planner says it.
#pragma once

#include <cstdint>
#include <string>

namespace flashattn {

enum class KernelChoice : uint8_t { automatic, sm80, sm90 };
enum class InferenceChoice : uint8_t { automatic, tile64, split_keys };
enum class GqaBackwardChoice : uint8_t { automatic, kv_major, kv_pairs, scratch };
enum class DeterministicDqChoice : uint8_t { automatic, ordered, chunks };

struct Overrides {
    KernelChoice forward_kernel = KernelChoice::automatic;
    KernelChoice backward_kernel = KernelChoice::automatic;
    InferenceChoice inference_kernel = InferenceChoice::automatic;
    GqaBackwardChoice backward_gqa = GqaBackwardChoice::automatic;
    DeterministicDqChoice deterministic_dq = DeterministicDqChoice::automatic;
    std::string cpu_isa;                                      // "" = the best the machine has
    int cpu_fwd_block_q = 0, cpu_fwd_block_k = 0;             // 0 = the backend's choice
    int cpu_bwd_block_q = 0, cpu_bwd_block_k = 0;
};

// Parses FLASHATTN_OVERRIDES's syntax; throws flashattn::Error naming a bad key or value.
Overrides parse_overrides(const std::string& spec);

// The overrides in force (a copy: another thread may replace them meanwhile).
Overrides current_overrides();
// fa_set_overrides: replaces them (spec as FLASHATTN_OVERRIDES; "" or NULL: none).
void set_overrides(const char* spec);

// FLASHATTN_NUM_THREADS, if set to a positive integer (capped at 1024); else 0.
int num_threads_from_environment();

} // namespace flashattn
