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

#include <cutlass/fast_math.h>

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

// tile_of_block of one problem, and a tile's sequence and head, with every divisor a problem constant
// prepared on the host (cutlass::FastDivmod: each division a multiply-high and a shift, where an
// integer division by a runtime value is a ~20-instruction sequence). A persistent CTA decodes every
// tile it claims, and at 1k tokens a d128 tile is only 8 key blocks, so its decode is a visible share
// of the tile. The same tiles as tile_of_block for every block below 2^31.
struct TileDecoder {
    cutlass::FastDivmod m_blocks, section_tiles, section_heads, last_section_heads, heads, group;
    int num_m_blocks = 1, sectioned_heads = 0, last_section = 0;

    TileDecoder() = default;
    // (Each divisor at least 1: FastDivmod(0) divides by zero on the host. A problem with no tiles
    // decodes none.)
    __host__ TileDecoder(int num_m_blocks_, int pairs, int section_heads_, int num_heads, int heads_per_kv_head)
        : m_blocks(positive(num_m_blocks_)), heads(positive(num_heads)), group(positive(heads_per_kv_head)),
          num_m_blocks(num_m_blocks_), sectioned_heads(section_heads_ > 0 ? section_heads_ : 0) {
        if (sectioned_heads > 0) {
            pairs = positive(pairs);
            section_tiles = cutlass::FastDivmod(positive(sectioned_heads * num_m_blocks));
            section_heads = cutlass::FastDivmod(sectioned_heads);
            last_section = (pairs - 1) / sectioned_heads;
            last_section_heads = cutlass::FastDivmod(pairs - last_section * sectioned_heads);
        }
    }
    static constexpr int positive(int v) { return v > 0 ? v : 1; }

    __host__ __device__ __forceinline__ TileCoord operator()(unsigned block) const {
        int quotient, remainder;
        if (sectioned_heads <= 0) {
            m_blocks(quotient, remainder, int(block));
            return {num_m_blocks - 1 - remainder, quotient};
        }
        int section, index;
        section_tiles(section, index, int(block));
        (section == last_section ? last_section_heads : section_heads)(quotient, remainder, index);
        return {num_m_blocks - 1 - quotient, section * sectioned_heads + remainder};
    }
    // (sequence, head) of a pair index bh, and a query head's K/V head.
    __host__ __device__ __forceinline__ void sequence_and_head(int bh, int& b, int& h) const { heads(b, h, bh); }
    __host__ __device__ __forceinline__ int kv_head(int h) const { return group.div(h); }
};

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
