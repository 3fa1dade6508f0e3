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

#include "kernels/fwd_args.h"

#include <cstdint>

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

// The work item of a CTA of the inference grid (the forward kernel's inference variant and the
// split-keys decode kernel): (query block, split, sequence, head), the query block fastest, then the
// split. Packed GQA: the grid's heads are KV heads and h is the first query head of the group (tile
// row r is query head h + r).
struct InferenceWorkItem {
    int m_block, split, b, h, h_kv;
    bool packed;
};

__host__ __device__ __forceinline__ InferenceWorkItem inference_work_item(unsigned block, const FwdArgs& args) {
    const TileCoord tile = tile_of_block(block, args.num_m_blocks, args.batch * args.num_heads, 0);
    InferenceWorkItem w;
    w.m_block = tile.m_block;
    w.split = tile.bh % args.num_splits;
    const int bh = tile.bh / args.num_splits;
    w.packed = args.pack_gqa;
    const int grid_heads = w.packed ? args.num_heads / args.heads_per_kv_head : args.num_heads;
    w.b = bh / grid_heads;
    w.h = w.packed ? (bh - w.b * grid_heads) * args.heads_per_kv_head : bh - w.b * grid_heads;
    w.h_kv = w.h / args.heads_per_kv_head;
    return w;
}

} // namespace flashattn::cuda
