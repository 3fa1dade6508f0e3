// Which (query block, sequence, head) tile a forward CTA computes: the order in which the grid's
// tiles reach the SMs.
//
// Under a causal or local mask the query blocks of a sequence do unequal work (block m of a causal
// square visits m + 1 K/V blocks), and a grid that ends with heavy tiles leaves SMs idle while the
// last ones finish. Longest-first over the whole grid fixes the tail, but a (sequence, head)'s K/V
// is then read once per query block from HBM instead of once into L2. So the pairs are grouped into
// sections whose K/V fits in L2, and within a section the tiles go heaviest query block first,
// the section's pairs fastest. Unmasked problems keep a pair's query blocks next to each other
// (section_heads = 0), where they share K/V in L2 while they run.
#pragma once

#include "fwd_args.h"
#include "grid_launch.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace flashattn::cuda {

struct TileCoord {
    int m_block; // query block
    int bh;      // sequence * heads + head
};

__host__ __device__ __forceinline__ TileCoord tile_of_block(unsigned block, int num_m_blocks, int pairs,
                                                            int section_heads) {
    if (section_heads <= 0) // a pair's query blocks together, its last (heaviest) block first
        return {num_m_blocks - 1 - int(block % unsigned(num_m_blocks)), int(block / unsigned(num_m_blocks))};
    const unsigned per_section = unsigned(section_heads) * unsigned(num_m_blocks);
    const int section = int(block / per_section);
    const int index = int(block - unsigned(section) * per_section);
    const int first = section * section_heads;
    const int heads_here = min(section_heads, pairs - first); // the last section may be short
    return {num_m_blocks - 1 - index / heads_here, first + index % heads_here};
}

// The launcher's choice of section_heads for a plain (non-inference) forward grid.
inline int32_t forward_section_heads(const FwdArgs& args, int block_m, int element_bytes) {
    const char* order = std::getenv("FLASHATTN_CUDA_TILE_ORDER"); // "pairs": A/B runs of the old order
    if (order && std::strcmp(order, "pairs") == 0) return 0;
    const int pairs = args.batch * args.num_heads;
    if (!args.mask.is_local() || args.seqlen_q <= block_m || pairs <= 1) return 0; // equal work per block
    // K and V of one pair (shared by heads_per_kv_head query heads); a section's K/V takes about
    // 16 MB of the 50-60 MB L2 (measured against 8 and 32 MB on the H200, docs/perf-log.md;
    // $FLASHATTN_CUDA_TILE_SECTION_MB overrides it for such runs).
    const char* section_mb = std::getenv("FLASHATTN_CUDA_TILE_SECTION_MB");
    const double kSectionBytes = (section_mb ? std::atof(section_mb) : 16.0) * 1024 * 1024;
    const double kv_bytes = 2.0 * args.seqlen_k * args.head_dim * element_bytes / args.heads_per_kv_head;
    const double heads = kSectionBytes / (kv_bytes > 1.0 ? kv_bytes : 1.0);
    return int32_t(heads < 1.0 ? 1 : heads > pairs ? pairs : heads);
}

// The grid of a plain forward launch with Traits' tiles (both forward kernels): sets the query
// blocks per (sequence, head) and the tile order in args; returns the CTA count, 0 when there is
// nothing to launch.
template <typename Traits>
int64_t plan_forward_grid(FwdArgs& args) {
    args.num_m_blocks = (args.seqlen_q + Traits::kBlockM - 1) / Traits::kBlockM;
    args.section_heads = forward_section_heads(args, Traits::kBlockM, int(sizeof(typename Traits::Element)));
    const int64_t ctas = int64_t(args.num_m_blocks) * args.batch * args.num_heads;
    return grid_has_work(ctas, "forward", "query blocks of ", Traits::kBlockM, " rows x batch ", args.batch,
                         " x heads ", args.num_heads)
               ? ctas
               : 0;
}

} // namespace flashattn::cuda
