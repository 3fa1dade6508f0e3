// Host-side checks of the forward kernel's index math: CuTe layouts are plain host/device
// functions, so the partitions the kernel relies on can be enumerated on a machine without a GPU.
//
//   nvcc -std=c++17 --expt-relaxed-constexpr -I include -I src -I src/cuda \
//        -isystem third_party/cutlass/include tests/gpu/layout_check.cu -o /tmp/layout_check && /tmp/layout_check
//
// What it checks, for every tiling the build can use:
//   - rows_cols(): each thread's accumulator rows/columns form a matrix (one row per r, one column
//     per c), and columns come in neighbouring pairs (j, j+1), j even, as dropout assumes;
//   - accumulator_as_a_operand(): the registers of S, reinterpreted as the A operand of P.V, hold
//     exactly the (row, key) elements the MMA expects there;
//   - the lse writers (lanes whose first accumulator column is 0) cover every row once;
//   - the global <-> shared copies cover every (row, column) of a tile exactly once;
//   - kv_block_range(): against brute force over random shapes and windows, every visited-block
//     decision and every "no mask needed" decision is right; likewise row_blocks() for the 64 rows
//     of each Hopper forward consumer within its tile;
//   - tile_of_block(): every grid index maps to a distinct (query block, pair), all are covered,
//     and within a section the query blocks come heaviest (last) first;
//   - the split-keys decode kernel (fwd_decode_kernel.cuh): one warp's tile as above; its ring
//     protocol replayed with the kernel's cp.async group counts (each warp computes each of its
//     blocks from the stage that block was loaded into, every wait covers the block it guards, no
//     fetch overwrites a stage still to be read, no fetch of the main loop is the range's last block
//     (they are copied as whole blocks), the warps together visit every block once); the
//     merge scratch (disjoint from Q, 16-byte aligned float4 rows, conflict-free float2 writes);
//     split_share() and inference_work_item() cover their ranges exactly once;
//   - the Hopper forward's producer copies (SwizzledTileCopy) of Q, K and V against CuTe's tiled
//     copy, and its TMA boxes of K and V (where each swizzled box lands), for every head dim and
//     the value-dim instance (V 128 wide beside Q/K 192: producer_copy_check.h); there, V^T is V's
//     bytes, P V's accumulator has S's rows and covers O once, and O's staging fits Q's buffer.
#include "kernels/decode/decode_kernel.cuh"
#include "kernels/forward/fwd_traits.cuh"
#include "kernels/forward_sm90/fwd_traits_sm90.cuh"
#include "device/score_policies.cuh"
#include "device/tile_ops.cuh"
#include "device/tile_order.cuh"
#include "device/wgmma_ops.cuh"

#include "host_check.h"
#include "key_mask_check.h"
#include "producer_copy_check.h"

#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

using namespace cute;
using namespace flashattn;
using namespace flashattn::cuda::kernels;


template <typename Traits>
void check_traits(const char* name) {
    constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kHeadDim = Traits::kHeadDim;
    typename Traits::TiledMma mma;
    std::set<int> lse_rows;
    std::map<std::pair<int, int>, int> s_cover;
    for (int tid = 0; tid < Traits::kThreads; ++tid) {
        auto thr = mma.get_thread_slice(tid);
        Tensor cS = thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
        Tensor rc = make_tensor(cS.data(), rows_cols(cS.layout()));
        for (int r = 0; r < size<0>(rc); ++r) {
            for (int c = 0; c < size<1>(rc); ++c) {
                const int row = get<0>(rc(r, c)), col = get<1>(rc(r, c));
                s_cover[{row, col}]++;
                CHECK(row == get<0>(rc(r, 0)), "%s: row of (r=%d, c=%d) differs along the row", name, r, c);
                CHECK(col == get<1>(rc(0, c)), "%s: column of (r=%d, c=%d) differs along the column", name, r, c);
                if (c % 2 == 0) CHECK(col % 2 == 0, "%s: even c must be an even column", name);
                if (c % 2 == 1) CHECK(col == get<1>(rc(r, c - 1)) + 1, "%s: columns (c-1, c) are not neighbours", name);
            }
        }
        // P as the A operand of P.V (M x kBlockN keys): same elements as the MMA's A partition.
        Tensor as_a = make_tensor(cS.data(), accumulator_as_a_operand(cS.layout()));
        Tensor cA = thr.partition_A(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
        CHECK(size(as_a) == size(cA), "%s: A operand sizes differ", name);
        CHECK(size<1>(as_a) == size<1>(cA) && size<2>(as_a) == size<2>(cA), "%s: A operand modes differ", name);
        for (int i = 0; i < size(cA); ++i) {
            CHECK(as_a(i) == cA(i), "%s: tid %d value %d: P register holds (%d,%d), MMA expects (%d,%d)", name, tid, i,
                  int(get<0>(as_a(i))), int(get<1>(as_a(i))), int(get<0>(cA(i))), int(get<1>(cA(i))));
        }
        // lse writers.
        Tensor cO = thr.partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
        Tensor orc = make_tensor(cO.data(), rows_cols(cO.layout()));
        if (get<1>(orc(0, 0)) == 0) {
            for (int r = 0; r < size<0>(orc); ++r) {
                CHECK(lse_rows.insert(get<0>(orc(r, 0))).second, "%s: lse row %d written twice", name,
                      int(get<0>(orc(r, 0))));
            }
        }
    }
    CHECK(int(s_cover.size()) == kBlockM * kBlockN, "%s: S partition covers %zu of %d elements", name,
          s_cover.size(), kBlockM * kBlockN);
    for (auto& [coord, n] : s_cover) CHECK(n == 1, "%s: S element (%d,%d) held %d times", name, coord.first, coord.second, n);
    CHECK(int(lse_rows.size()) == kBlockM, "%s: lse writers cover %zu of %d rows", name, lse_rows.size(), kBlockM);

    // Global <-> shared copies: every element of a Q tile and a K/V tile exactly once.
    auto check_copy = [&](auto tiled_copy, auto rows, const char* what) {
        std::map<std::pair<int, int>, int> cover;
        for (int tid = 0; tid < Traits::kThreads; ++tid) {
            auto thr = tiled_copy.get_thread_slice(tid);
            Tensor c = thr.partition_S(make_identity_tensor(Shape<decltype(rows), Int<kHeadDim>>{}));
            for (int i = 0; i < size(c); ++i) cover[{get<0>(c(i)), get<1>(c(i))}]++;
            // The per-chunk predicates read the first element's coordinates: chunks must be rows of 8.
            for (int m = 0; m < size<1>(c); ++m)
                for (int k = 0; k < size<2>(c); ++k)
                    for (int v = 0; v < size<0>(c); ++v) {
                        CHECK(get<0>(c(v, m, k)) == get<0>(c(0, m, k)), "%s %s: chunk spans rows", name, what);
                        CHECK(get<1>(c(v, m, k)) == get<1>(c(0, m, k)) + v, "%s %s: chunk not contiguous", name, what);
                    }
        }
        CHECK(int(cover.size()) == int(rows) * kHeadDim, "%s %s: copy covers %zu elements", name, what, cover.size());
        for (auto& [coord, n] : cover) CHECK(n == 1, "%s %s: (%d,%d) copied %d times", name, what, coord.first, coord.second, n);
    };
    check_copy(typename Traits::GmemLoad{}, Int<kBlockM>{}, "Q load");
    check_copy(typename Traits::GmemLoad{}, Int<kBlockN>{}, "K/V load");
    check_copy(typename Traits::GmemStore{}, Int<kBlockM>{}, "O store");
    std::printf("%-28s ok so far (%d failures)\n", name, failures);
}

// A random sequence (up to 701 queries, 700 keys, square a quarter of the time) and mask (windows
// of either side, causal, none).
void random_masked_problem(std::mt19937& rng, SequenceBounds& s, MaskSpec& mask) {
    std::uniform_int_distribution<int> len(0, 700), win(-1, 300), coin(0, 3);
    s = SequenceBounds{len(rng) + 1, len(rng), 0, 0};
    if (coin(rng) == 0) s.k_len = s.q_len; // square, the common case
    mask = MaskSpec{coin(rng) == 0 ? -1 : win(rng), coin(rng) == 0 ? -1 : win(rng)};
    if (coin(rng) == 0) mask = MaskSpec{-1, 0}; // causal
    if (coin(rng) == 0) mask = MaskSpec{-1, -1};
}

// Whether some (any) and every (all) pair of rows [first_row, last_row] and keys [key_begin,
// key_end) is allowed (keys past k_len are not).
std::pair<bool, bool> block_keys(const MaskSpec& mask, const SequenceBounds& s, int first_row, int last_row,
                                 int key_begin, int key_end) {
    bool any = false, all = true;
    for (int i = first_row; i <= last_row; ++i)
        for (int j = key_begin; j < key_end; ++j) {
            const bool ok = j < s.k_len && mask.allowed(i, j, s.q_len, s.k_len);
            any |= ok;
            all &= ok;
        }
    return {any, all};
}

template <int kBlockM, int kBlockN>
void check_block_ranges(std::mt19937& rng) {
    for (int trial = 0; trial < 4000; ++trial) {
        SequenceBounds s;
        MaskSpec mask;
        random_masked_problem(rng, s, mask);
        for (int m0 = 0; m0 < s.q_len; m0 += kBlockM) {
            const KvBlockRange r = kv_block_range<kBlockM, kBlockN>(mask, s, m0);
            const int last_row = std::min(m0 + kBlockM, s.q_len) - 1;
            const int n_blocks = (s.k_len + kBlockN - 1) / kBlockN;
            CHECK(r.n_begin >= 0 && r.n_end <= n_blocks && r.n_begin <= r.n_end, "range [%d,%d) of %d blocks",
                  r.n_begin, r.n_end, n_blocks);
            for (int n = 0; n < n_blocks; ++n) {
                const auto [any, all] = block_keys(mask, s, m0, last_row, n * kBlockN, (n + 1) * kBlockN);
                const bool visited = n >= r.n_begin && n < r.n_end;
                const bool unmasked = visited && n >= r.unmasked_begin && n < r.unmasked_end;
                CHECK(!any || visited, "q %d k %d win (%lld,%lld) m0 %d: block %d has allowed keys but is skipped",
                      s.q_len, s.k_len, (long long)mask.window_left, (long long)mask.window_right, m0, n);
                CHECK(!unmasked || all, "q %d k %d win (%lld,%lld) m0 %d: block %d marked unmasked but is not",
                      s.q_len, s.k_len, (long long)mask.window_left, (long long)mask.window_right, m0, n);
            }
        }
    }
    std::printf("kv_block_range<%d,%d>          ok so far (%d failures)\n", kBlockM, kBlockN, failures);
}

// row_blocks(): the blocks of one consumer's rows [m0 + c * kRows, + kRows) of a kBlockM-row tile
// lie within the tile's range, hold every block with an allowed key of those rows (none past the
// sequence's end), and the fully allowed ones are allowed for every one of its rows.
template <int kBlockM, int kRows, int kBlockN>
void check_row_blocks(std::mt19937& rng) {
    for (int trial = 0; trial < 4000; ++trial) {
        SequenceBounds s;
        MaskSpec mask;
        random_masked_problem(rng, s, mask);
        // The tiles as the Hopper forward takes them: aligned to the sequence's end under a right
        // window edge (the first tile then starts before row 0), else from row 0.
        const int shift = mask.window_right >= 0 ? end_aligned_shift<kBlockM>(s.q_len) : 0;
        CHECK(shift % 64 == 0 && shift < kBlockM && (s.q_len + shift + kBlockM - 1) / kBlockM == (s.q_len + kBlockM - 1) / kBlockM,
              "q %d: end-aligned shift %d (tiles of %d rows)", s.q_len, shift, kBlockM);
        for (int m0 = -shift; m0 < s.q_len; m0 += kBlockM) {
            const KvBlockRange tile = kv_block_range<kBlockM, kBlockN>(mask, s, m0);
            for (int c = 0; c < kBlockM / kRows; ++c) {
                const int r0 = m0 + c * kRows, last_row = std::min(r0 + kRows, s.q_len) - 1;
                const KvBlockRange r = row_blocks<kRows, kBlockN>(mask, s, tile, r0);
                const int blocks = r.n_end - r.n_begin;
                CHECK((r0 < s.q_len && r0 >= 0) || blocks == 0, "q %d m0 %d part %d: rows outside the sequence see %d blocks",
                      s.q_len, m0, c, blocks);
                if (r0 < 0) continue;
                CHECK(blocks >= 0 &&
                          (blocks == 0 ? r.n_begin == tile.n_begin
                                           : r.n_begin >= tile.n_begin && r.n_end <= tile.n_end),
                      "q %d k %d m0 %d part %d: rows' range [%d,%d) (%d) outside the tile's [%d,%d)", s.q_len,
                      s.k_len, m0, c, r.n_begin, r.n_end, blocks, tile.n_begin, tile.n_end);
                for (int n = tile.n_begin; n < tile.n_end; ++n) {
                    const auto [any, all] = block_keys(mask, s, r0, last_row, n * kBlockN, (n + 1) * kBlockN);
                    const bool visited = n >= r.n_begin && n < r.n_end;
                    const bool unmasked = visited && n >= r.unmasked_begin && n < r.unmasked_end;
                    CHECK(!any || visited, "q %d k %d win (%lld,%lld) m0 %d part %d: block %d has allowed keys but is passed",
                          s.q_len, s.k_len, (long long)mask.window_left, (long long)mask.window_right, m0, c, n);
                    CHECK(!unmasked || all, "q %d k %d win (%lld,%lld) m0 %d part %d: block %d marked unmasked but is not",
                          s.q_len, s.k_len, (long long)mask.window_left, (long long)mask.window_right, m0, c, n);
                }
            }
        }
    }
    std::printf("row_blocks<%d,%d> of %d rows     ok so far (%d failures)\n", kRows, kBlockN, kBlockM, failures);
}

// GQA packing (seqlen_q == 1): the tile's rows are heads, every one of them query row 0 of a one-row
// problem, so the visited and unmasked blocks are exactly those of that one row.
template <int kBlockM, int kBlockN>
void check_packed_block_ranges(std::mt19937& rng) {
    std::uniform_int_distribution<int> len(0, 700), win(0, 300), coin(0, 2), group(1, 2 * kBlockM);
    for (int trial = 0; trial < 3000; ++trial) {
        SequenceBounds packed{group(rng), len(rng), 0, 0};
        packed.rows_are_heads = true;
        const SequenceBounds one_row{1, packed.k_len, 0, 0};
        MaskSpec mask{coin(rng) == 0 ? -1 : win(rng), coin(rng) == 0 ? -1 : win(rng)};
        if (coin(rng) == 0) mask = MaskSpec{-1, 0};
        for (int m0 = 0; m0 < packed.q_len; m0 += kBlockM) {
            const KvBlockRange a = kv_block_range<kBlockM, kBlockN>(mask, packed, m0);
            const KvBlockRange b = kv_block_range<kBlockM, kBlockN>(mask, one_row, 0);
            CHECK(a.n_begin == b.n_begin && a.n_end == b.n_end && a.unmasked_begin == b.unmasked_begin &&
                      a.unmasked_end == b.unmasked_end,
                  "packed range <%d,%d> k_len %d group %d differs from the one-row range", kBlockM, kBlockN,
                  packed.k_len, packed.q_len);
        }
    }
    std::printf("packed kv_block_range<%d,%d>   ok so far (%d failures)\n", kBlockM, kBlockN, failures);
}

void check_tile_order(std::mt19937& rng) {
    for (int trial = 0; trial < 400; ++trial) {
        const int num_m_blocks = 1 + int(rng() % 20), pairs = 1 + int(rng() % 40);
        const int section_heads = trial % 4 == 0 ? 0 : 1 + int(rng() % (pairs + 3)); // may exceed pairs
        std::set<std::pair<int, int>> seen;
        int prev_section = -1, prev_m = 0;
        for (int block = 0; block < num_m_blocks * pairs; ++block) {
            const flashattn::cuda::TileCoord t =
                flashattn::cuda::tile_of_block(unsigned(block), num_m_blocks, pairs, section_heads);
            CHECK(t.m_block >= 0 && t.m_block < num_m_blocks && t.bh >= 0 && t.bh < pairs,
                  "tile %d of (%d blocks, %d pairs, section %d) out of range: (%d, %d)", block, num_m_blocks, pairs,
                  section_heads, t.m_block, t.bh);
            CHECK(seen.insert({t.m_block, t.bh}).second, "tile (%d, %d) visited twice", t.m_block, t.bh);
            if (section_heads > 0) {
                const int section = t.bh / section_heads;
                CHECK(section >= prev_section, "sections out of order at block %d", block);
                if (section == prev_section)
                    CHECK(t.m_block <= prev_m, "section %d: query block %d after %d", section, t.m_block, prev_m);
                prev_section = section;
                prev_m = t.m_block;
            }
        }
        CHECK(int(seen.size()) == num_m_blocks * pairs, "tiles missed: %d of %d", int(seen.size()),
              num_m_blocks * pairs);
    }
    std::printf("tile_of_block                ok so far (%d failures)\n", failures);
    // TileDecoder (the Hopper forward's decode by multiply-high) gives tile_of_block's tiles, and the
    // division of the pair into sequence and head and of the head into its K/V head, on small
    // problems whole and near 2^31 tiles at their ends.
    auto check_decoder = [&](int num_m_blocks, int pairs, int section_heads, int num_heads, int group,
                             unsigned first, unsigned last) {
        const flashattn::cuda::TileDecoder decoder(num_m_blocks, pairs, section_heads, num_heads, group);
        for (unsigned block = first; block < last; ++block) {
            const flashattn::cuda::TileCoord a = flashattn::cuda::tile_of_block(block, num_m_blocks, pairs, section_heads);
            const flashattn::cuda::TileCoord b = decoder(block);
            int seq = 0, head = 0;
            decoder.sequence_and_head(b.bh, seq, head);
            const bool same = a.m_block == b.m_block && a.bh == b.bh && seq == a.bh / num_heads &&
                              head == a.bh % num_heads && decoder.kv_head(head) == head / group;
            CHECK(same, "TileDecoder(%d blocks, %d pairs, section %d, %d heads, group %d) differs at tile %u",
                  num_m_blocks, pairs, section_heads, num_heads, group, block);
            if (!same) return;
        }
    };
    for (int trial = 0; trial < 400; ++trial) {
        const int group = 1 + int(rng() % 8), num_heads = group * (1 + int(rng() % 8));
        const int num_m_blocks = 1 + int(rng() % 40), pairs = num_heads * (1 + int(rng() % 12));
        const int section_heads = trial % 4 == 0 ? 0 : 1 + int(rng() % (pairs + 3));
        check_decoder(num_m_blocks, pairs, section_heads, num_heads, group, 0, unsigned(num_m_blocks * pairs));
    }
    // 4096 x 524,287 = 2^31 - 4096 tiles: the last 20,000 of them.
    const int kLargeHeads = 128, kLargeBlocks = 4096, kLargePairs = 524287;
    for (const int section_heads : {0, 1, 7, 4096})
        for (const int group : {1, 8})
            check_decoder(kLargeBlocks, kLargePairs, section_heads, kLargeHeads, group,
                          unsigned(kLargeBlocks) * unsigned(kLargePairs) - 20000u,
                          unsigned(kLargeBlocks) * unsigned(kLargePairs));
    std::printf("TileDecoder                  ok so far (%d failures)\n", failures);
}

// The split-keys kernel's ring, replayed on the host: per thread, cp.async groups are numbered in
// commit order (Q = 0, then one per prologue block, then one per step); cp.async.wait_group<N>
// completes every group but the newest N. Each step's computed block must sit, complete, in its
// stage; a fetch may only overwrite a stage whose block the warp has computed.
template <int kWarps, int kStages>
void check_split_keys_ring(std::mt19937& rng) {
    using Ring = WarpBlockRing<kWarps, kStages>;
    std::uniform_int_distribution<int> len(0, 60);
    for (int trial = 0; trial < 2000; ++trial) {
        const int n_begin = len(rng) % 7, n_end = n_begin + len(rng);
        std::map<int, int> computed;
        for (int warp = 0; warp < kWarps; ++warp) {
            const Ring ring{n_end - 1 - warp};
            std::vector<int> stage_block(kStages, -1), stage_group(kStages, -1);
            std::set<int> done; // blocks this warp has computed
            int groups = 1;     // Q's group
            for (int i = 0; i < kStages - 1; ++i, ++groups) {
                const int n = ring.prologue_block(i);
                if (n < n_begin) continue;
                stage_block[ring.stage(n)] = n;
                stage_group[ring.stage(n)] = groups;
            }
            // The Q barrier: wait_group<kStages - 1> completes group 0.
            CHECK(groups - (kStages - 1) >= 1, "<%d,%d>: Q's group not complete at the barrier", kWarps, kStages);
            for (int n = ring.top; n >= n_begin; n -= kWarps) {
                const int complete = groups - (kStages - 2); // groups [0, complete) are done after the wait
                const int st = ring.stage(n);
                CHECK(st >= 0 && st < kStages, "<%d,%d>: stage %d out of range", kWarps, kStages, st);
                CHECK(stage_block[st] == n, "<%d,%d> range [%d,%d) warp %d: block %d computed from a stage holding %d",
                      kWarps, kStages, n_begin, n_end, warp, n, stage_block[st]);
                CHECK(stage_group[st] < complete, "<%d,%d>: block %d's group %d not complete (%d done)", kWarps,
                      kStages, n, stage_group[st], complete);
                const int fetch = Ring::fetched_during(n);
                if (fetch >= n_begin) {
                    // The main loop copies its fetches as whole blocks (fwd_decode_kernel.cuh's
                    // BlockLoads): none may be the range's last block, the one a sequence's ragged
                    // tail can fall into.
                    CHECK(fetch < n_end - 1, "<%d,%d> range [%d,%d): the loop fetches the last block %d", kWarps,
                          kStages, n_begin, n_end, fetch);
                    const int target = ring.stage(fetch);
                    CHECK(stage_block[target] == -1 || done.count(stage_block[target]),
                          "<%d,%d>: fetch of block %d overwrites block %d, not yet computed", kWarps, kStages, fetch,
                          stage_block[target]);
                    CHECK(stage_block[target] != n, "<%d,%d>: fetch of %d overwrites the block being computed",
                          kWarps, kStages, fetch);
                    stage_block[target] = fetch;
                    stage_group[target] = groups;
                }
                ++groups; // one group per step, empty or not
                done.insert(n);
                computed[n]++;
            }
        }
        CHECK(int(computed.size()) == std::max(0, n_end - n_begin), "<%d,%d> range [%d,%d): %zu blocks computed",
              kWarps, kStages, n_begin, n_end, computed.size());
        for (auto& [n, times] : computed)
            CHECK(n >= n_begin && n < n_end && times == 1, "<%d,%d>: block %d computed %d times", kWarps, kStages, n,
                  times);
    }
    std::printf("split-keys ring <%d warps, %d stages> ok so far (%d failures)\n", kWarps, kStages, failures);
}

// The merge's scratch: each warp writes its O rows as float2 (MMA accumulator pairs) and the merge
// reads float4 chunks of rows kMergeRowFloats apart.
template <typename Traits>
void check_split_keys_merge(const char* name) {
    using Warp = typename Traits::Warp;
    constexpr int kHeadDim = Warp::kHeadDim;
    const int q_bytes = Warp::kSmemQElems * int(sizeof(typename Warp::Element));
    const int merge_bytes = Traits::kMergeFloats * 4;
    CHECK(q_bytes % 16 == 0 && (Traits::kWarps * Warp::kBlockM * 4) % 16 == 0 && Traits::kMergeRowFloats % 4 == 0,
          "%s: merge scratch not 16-byte aligned", name);
    CHECK(q_bytes + merge_bytes <= Traits::kSmemBytes, "%s: merge scratch past the end", name);
    typename Warp::TiledMma mma;
    // Half-warps issue the 64-bit stores of one instruction together: 16 lanes, 32 banks.
    std::map<std::pair<int, int>, int> cover;
    for (int half = 0; half < 2; ++half) {
        for (int r = 0; r < 2; ++r) {
            for (int c = 0; c < kHeadDim / 4; c += 2) {
                std::set<int> banks;
                for (int lane = 16 * half; lane < 16 * half + 16; ++lane) {
                    auto thr = mma.get_thread_slice(lane);
                    Tensor cO = thr.partition_C(make_identity_tensor(Shape<Int<16>, Int<kHeadDim>>{}));
                    Tensor orc = make_tensor(cO.data(), rows_cols(cO.layout()));
                    if (r >= size<0>(orc) || c + 1 >= size<1>(orc)) continue;
                    const int row = get<0>(orc(r, c)), col = get<1>(orc(r, c));
                    const int at = row * Traits::kMergeRowFloats + col;
                    CHECK(at % 2 == 0, "%s: float2 store at odd offset", name);
                    banks.insert(at % 32);
                    banks.insert((at + 1) % 32);
                    cover[{row, col}]++;
                    cover[{row, col + 1}]++;
                }
                CHECK(banks.empty() || banks.size() == 32, "%s: half-warp %d (r %d, c %d) stores hit %zu banks", name,
                      half, r, c, banks.size());
            }
        }
    }
    CHECK(int(cover.size()) == 16 * kHeadDim, "%s: merge writes cover %zu of %d elements", name, cover.size(),
          16 * kHeadDim);
    for (auto& [coord, n] : cover) CHECK(n == 1, "%s: O element (%d,%d) written %d times", name, coord.first,
                                         coord.second, n);
    std::printf("%-28s ok so far (%d failures)\n", name, failures);
}

void check_split_shares(std::mt19937& rng) {
    std::uniform_int_distribution<int> len(0, 500), splits(1, 130);
    for (int trial = 0; trial < 3000; ++trial) {
        KvBlockRange r{len(rng) % 40, 0, 0, 0};
        r.n_end = r.n_begin + len(rng);
        const int s = splits(rng);
        std::vector<int> seen(r.n_end, 0);
        for (int split = 0; split < s; ++split) {
            const KvBlockRange share = split_share(r, split, s);
            CHECK(share.n_begin <= share.n_end || share.n_begin > r.n_end, "share [%d,%d) inverted", share.n_begin,
                  share.n_end);
            for (int n = share.n_begin; n < share.n_end; ++n) {
                CHECK(n >= r.n_begin && n < r.n_end, "share of split %d/%d holds block %d outside [%d,%d)", split, s,
                      n, r.n_begin, r.n_end);
                if (n >= 0 && n < r.n_end) seen[n]++;
            }
        }
        for (int n = r.n_begin; n < r.n_end; ++n)
            CHECK(seen[n] == 1, "block %d of [%d,%d) in %d of %d shares", n, r.n_begin, r.n_end, seen[n], s);
    }
    std::printf("split_share                  ok so far (%d failures)\n", failures);
}

void check_inference_work_items(std::mt19937& rng) {
    for (int trial = 0; trial < 300; ++trial) {
        flashattn::cuda::FwdArgs args{};
        args.num_m_blocks = 1 + int(rng() % 3);
        args.num_splits = 1 + int(rng() % 9);
        args.batch = 1 + int(rng() % 5);
        const int kv_heads = 1 + int(rng() % 4), group = 1 + int(rng() % 6);
        args.num_heads = kv_heads * group;
        args.heads_per_kv_head = group;
        args.pack_gqa = rng() % 2 == 0;
        const int grid_heads = args.pack_gqa ? kv_heads : args.num_heads;
        const int ctas = args.num_m_blocks * args.num_splits * args.batch * grid_heads;
        std::set<std::tuple<int, int, int, int>> seen;
        for (int block = 0; block < ctas; ++block) {
            const flashattn::cuda::InferenceWorkItem w = flashattn::cuda::inference_work_item(unsigned(block), args);
            CHECK(w.m_block >= 0 && w.m_block < args.num_m_blocks && w.split >= 0 && w.split < args.num_splits &&
                      w.b >= 0 && w.b < args.batch && w.h >= 0 && w.h < args.num_heads,
                  "work item %d out of range", block);
            CHECK(w.h_kv == w.h / group && (!args.pack_gqa || w.h % group == 0), "work item %d: heads %d/%d", block,
                  w.h, w.h_kv);
            CHECK(seen.insert({w.m_block, w.split, w.b, w.h}).second, "work item %d repeated", block);
        }
    }
    std::printf("inference_work_item          ok so far (%d failures)\n", failures);
}

// The split-keys decode kernel's K/V copy (one warp, 4 rows per pass at 64-column atoms: two bases).
template <typename Traits>
void check_split_keys_copy(const char* name) {
    using Warp = typename Traits::Warp;
    check_producer_copy<typename Warp::Element, typename Warp::SmemLayoutKV, 32, Warp::kSwizzleCols>(name, "K/V");
}

template <typename Traits>
void check_sm90_producer(const char* name) {
    using Element = typename Traits::Element;
    constexpr int kThreads = Traits::kProducerThreads;
    check_producer_copy<Element, typename Traits::SmemLayoutQ, kThreads, Traits::kSwizzleCols>(name, "Q");
    check_producer_copy<Element, typename Traits::SmemLayoutK, kThreads, Traits::kSwizzleCols>(name, "K");
    check_producer_copy<Element, typename Traits::SmemLayoutV, kThreads, Traits::kSwizzleColsV>(name, "V");
    // K and V by TMA (kv_tensor_maps.cuh): one box of kBlockN rows per column block, each tensor in
    // its own swizzle-row-wide blocks.
    check_tma_boxes<Element, typename Traits::SmemLayoutK, Traits::kSwizzleCols>(name, "K by TMA", Traits::kBlockN);
    check_tma_boxes<Element, typename Traits::SmemLayoutV, Traits::kSwizzleColsV>(name, "V by TMA", Traits::kBlockN);
    // O by TMA from its own buffer: a box of one consumer's 64 rows per column block.
    if constexpr (Traits::kOwnOBuffer)
        check_tma_boxes<Element, typename Traits::SmemLayoutO, Traits::kSwizzleColsV>(name, "O by TMA",
                                                                                      Traits::kEpilogueRows);
}

// What P V and O's epilogue rely on, at any value head dim (fwd_kernel_sm90.cuh): V^T (the MN-major
// B operand) addresses V's bytes transposed; O's accumulator (TiledMmaO, 64 x kHeadDimV per
// consumer) has the rows of S's accumulator in each thread (the softmax rescales and normalises it
// by S's row statistics), covers the O tile once, and its register -> shared copy writes each
// element of SmemLayoutO once, inside Q's buffer where O is staged there.
template <typename Traits>
void check_sm90_value_dim(const char* name) {
    constexpr int kBlockM = Traits::kBlockM, kBlockN = Traits::kBlockN, kDv = Traits::kHeadDimV;
    using Element = typename Traits::Element;
    const uintptr_t base = uintptr_t(3) << 20;
    Tensor v = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(base)), typename Traits::SmemLayoutV{});
    Tensor vt = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(base)), typename Traits::SmemLayoutVt{});
    for (int n = 0; n < kBlockN; ++n)
        for (int d = 0; d < kDv; ++d)
            CHECK(raw_pointer_cast(&vt(d, n)) == raw_pointer_cast(&v(n, d)), "%s: V^T (%d, %d) is not V (%d, %d)", name,
                  d, n, n, d);
    typename Traits::TiledMmaS mma_s;
    typename Traits::TiledMmaO mma_o;
    std::map<std::pair<int, int>, int> o_cover, staged;
    auto copy_o = make_tiled_copy_C(typename Traits::SmemCopyO{}, mma_o);
    Tensor so = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(base)), typename Traits::SmemLayoutO{});
    const int o_limit = Traits::kOwnOBuffer ? Traits::kOBytes : Traits::kQBytes;
    for (int tid = 0; tid < Traits::kThreads; ++tid) {
        Tensor cs = mma_s.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kBlockN>>{}));
        Tensor co = mma_o.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<kBlockM>, Int<kDv>>{}));
        Tensor s_rc = make_tensor(cs.data(), wgmma_rows_cols(cs.layout()));
        Tensor o_rc = make_tensor(co.data(), wgmma_rows_cols(co.layout()));
        CHECK(size<0>(s_rc) == size<0>(o_rc), "%s: thread %d holds %d rows of S, %d of O", name, tid,
              int(size<0>(s_rc)), int(size<0>(o_rc)));
        for (int r = 0; r < int(size<0>(o_rc)); ++r) {
            CHECK(get<0>(o_rc(r, 0)) == get<0>(s_rc(r, 0)), "%s: thread %d row %d of O is %d, of S %d", name, tid, r,
                  int(get<0>(o_rc(r, 0))), int(get<0>(s_rc(r, 0))));
            for (int c = 0; c < int(size<1>(o_rc)); ++c) {
                CHECK(get<0>(o_rc(r, c)) == get<0>(o_rc(r, 0)), "%s: thread %d O row %d not one row", name, tid, r);
                o_cover[{int(get<0>(o_rc(r, c))), int(get<1>(o_rc(r, c)))}]++;
            }
        }
        auto thr = copy_o.get_thread_slice(tid);
        Tensor dst = thr.partition_D(so);
        Tensor dst_c = thr.partition_D(make_identity_tensor(Shape<Int<kBlockM>, Int<kDv>>{}));
        for (int i = 0; i < int(size(dst)); ++i) {
            const int at = int(reinterpret_cast<uintptr_t>(raw_pointer_cast(&dst(i))) - base);
            CHECK(at >= 0 && at + int(sizeof(Element)) <= o_limit, "%s: O's staging writes byte %d past %d", name, at,
                  o_limit);
            CHECK(raw_pointer_cast(&dst(i)) == raw_pointer_cast(&so(get<0>(dst_c(i)), get<1>(dst_c(i)))),
                  "%s: O's staging copy element %d of thread %d misplaced", name, i, tid);
            staged[{int(get<0>(dst_c(i))), int(get<1>(dst_c(i)))}]++;
        }
    }
    CHECK(int(o_cover.size()) == kBlockM * kDv, "%s: O's accumulator covers %d of %d", name, int(o_cover.size()),
          kBlockM * kDv);
    for (auto& [rc, n] : o_cover) CHECK(n == 1, "%s: O element (%d, %d) in %d registers", name, rc.first, rc.second, n);
    CHECK(int(staged.size()) == kBlockM * kDv, "%s: O's staging covers %d of %d", name, int(staged.size()),
          kBlockM * kDv);
    for (auto& [rc, n] : staged) CHECK(n == 1, "%s: O element (%d, %d) staged %d times", name, rc.first, rc.second, n);
    std::printf("%-28s ok so far (%d failures): %d B of shared memory, O %s\n", name, failures, Traits::kSmemBytes,
                Traits::kOwnOBuffer ? "in its own buffer" : "in Q's buffer");
}

// The forward kernels' masks on their (row, key) score views: the Hopper forward's 64-row wgmma
// accumulator (TiledMmaS), the mma.sync kernels' warp tiles (accumulator_coords), each with its
// columns in pairs 8 apart, so that apply_key_mask takes a row's allowed keys as bits.
template <typename Traits>
void check_sm90_fwd_key_mask(const char* name, std::mt19937& rng) {
    constexpr int N = Traits::kBlockN;
    typename Traits::TiledMmaS mma_s;
    auto view = [&](int tid) {
        Tensor c = mma_s.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<64>, Int<N>>{}));
        return make_tensor(c.data(), wgmma_rows_cols(c.layout()));
    };
    check_key_mask<decltype(view(0))>(name, 128, 64, N, view, rng, 1);
}

template <typename Traits>
void check_fwd_key_mask(const char* name, std::mt19937& rng) {
    constexpr int M = Traits::kBlockM, N = Traits::kBlockN;
    typename Traits::TiledMma mma;
    auto view = [&](int tid) {
        Tensor c = mma.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
        return make_tensor(c.data(), rows_cols(c.layout()));
    };
    check_key_mask<decltype(view(0))>(name, Traits::kThreads, M, N, view, rng, decltype(size<1>(view(0)))::value <= 32 ? 1 : -1);
}

int main() {
    using bf16 = cutlass::bfloat16_t;
    using fp16 = cutlass::half_t;
    check_sm90_producer<DefaultSm90FwdTraits<32, bf16>>("sm90 d32");
    check_sm90_producer<DefaultSm90FwdTraits<64, bf16>>("sm90 d64");
    check_sm90_producer<DefaultSm90FwdTraits<96, fp16>>("sm90 d96");
    check_sm90_producer<DefaultSm90FwdTraits<128, bf16>>("sm90 d128");
    check_sm90_producer<DefaultSm90FwdTraits<192, bf16>>("sm90 d192");
    check_sm90_producer<DefaultSm90FwdTraits<256, fp16>>("sm90 d256");
    check_sm90_producer<DefaultSm90FwdTraits<192, bf16, 128>>("sm90 d192/128");
    check_sm90_producer<DefaultSm90FwdTraits<192, fp16, 128>>("sm90 d192/128 fp16");
    check_sm90_value_dim<DefaultSm90FwdTraits<64, bf16>>("sm90 d64 P V and O");
    check_sm90_value_dim<DefaultSm90FwdTraits<128, bf16>>("sm90 d128 P V and O");
    check_sm90_value_dim<DefaultSm90FwdTraits<256, fp16>>("sm90 d256 P V and O");
    check_sm90_value_dim<DefaultSm90FwdTraits<192, bf16, 128>>("sm90 d192/128 P V and O");
    static_assert(DefaultSm90FwdTraits<64, bf16>::kBlockM == 192 && DefaultSm90FwdTraits<64, bf16>::kWarpGroups == 3 &&
                  DefaultSm90FwdTraits<64, bf16>::kConsumerRegs == 160);
    static_assert(DefaultSm90FwdTraits<192, bf16, 128>::kBlockN == 128 && !DefaultSm90FwdTraits<192, bf16, 128>::kOwnOBuffer &&
                  DefaultSm90FwdTraits<192, bf16, 128>::kQBuffers == 1 &&
                  DefaultSm90FwdTraits<192, bf16, 128>::kSmemBytes == 48 * 1024 + 2 * 48 * 1024 + 2 * 32 * 1024 + 136);
    // Two Q buffers beside O's own with two consumers (d128: the next tile's Q loads while a tile runs).
    static_assert(DefaultSm90FwdTraits<128, bf16>::kQBuffers == 2 && DefaultSm90FwdTraits<64, bf16>::kQBuffers == 1 &&
                  DefaultSm90FwdTraits<128, bf16>::kSmemBytes == 3 * 32 * 1024 + 4 * 32 * 1024 + 136 &&
                  DefaultSm90FwdTraits<256, fp16>::kQBuffers == 1);
    std::printf("sm90 forward producer copies  ok so far (%d failures)\n", failures);
    check_traits<DefaultFwdTraits<32, bf16>>("d32 default");
    check_traits<DefaultFwdTraits<64, bf16>>("d64 default");
    check_traits<DefaultFwdTraits<96, fp16>>("d96 default fp16");
    check_traits<DefaultFwdTraits<128, bf16>>("d128 default");
    check_traits<DefaultFwdTraits<192, bf16>>("d192 default");
    check_traits<DefaultFwdTraits<256, fp16>>("d256 default fp16");
    // The inference variant's tiles (paged loads rely on the same chunk coverage as load_tile).
    check_traits<InferenceFwdTraits<32, bf16>>("d32 inference");
    check_traits<InferenceFwdTraits<64, fp16>>("d64 inference fp16");
    check_traits<InferenceFwdTraits<96, bf16>>("d96 inference");
    check_traits<InferenceFwdTraits<128, bf16>>("d128 inference");
    check_traits<InferenceFwdTraits<192, bf16>>("d192 inference");
    check_traits<InferenceFwdTraits<256, bf16>>("d256 inference");
    // The split-keys decode kernel: one warp's tile, then its CTA's merge scratch.
    check_traits<SplitKeysDecodeTraits<32, bf16>::Warp>("d32 split-keys warp");
    check_traits<SplitKeysDecodeTraits<64, fp16>::Warp>("d64 split-keys warp fp16");
    check_traits<SplitKeysDecodeTraits<96, bf16>::Warp>("d96 split-keys warp");
    check_traits<SplitKeysDecodeTraits<128, bf16>::Warp>("d128 split-keys warp");
    check_traits<SplitKeysDecodeTraits<192, bf16>::Warp>("d192 split-keys warp");
    check_traits<SplitKeysDecodeTraits<256, bf16>::Warp>("d256 split-keys warp");
    check_split_keys_copy<SplitKeysDecodeTraits<32, bf16>>("d32 split-keys warp");
    check_split_keys_copy<SplitKeysDecodeTraits<64, fp16>>("d64 split-keys warp fp16");
    check_split_keys_copy<SplitKeysDecodeTraits<96, bf16>>("d96 split-keys warp");
    check_split_keys_copy<SplitKeysDecodeTraits<128, bf16>>("d128 split-keys warp");
    check_split_keys_copy<SplitKeysDecodeTraits<256, bf16>>("d256 split-keys warp");
    check_split_keys_merge<SplitKeysDecodeTraits<32, bf16>>("d32 split-keys merge");
    check_split_keys_merge<SplitKeysDecodeTraits<96, fp16>>("d96 split-keys merge");
    check_split_keys_merge<SplitKeysDecodeTraits<128, bf16>>("d128 split-keys merge");
    check_split_keys_merge<SplitKeysDecodeTraits<256, bf16>>("d256 split-keys merge");
    std::printf("split-keys stages: d64 %d, d128 %d, d256 %d; shared memory d128 %d bytes\n",
                SplitKeysDecodeTraits<64, bf16>::kKvStages, SplitKeysDecodeTraits<128, bf16>::kKvStages,
                SplitKeysDecodeTraits<256, bf16>::kKvStages, SplitKeysDecodeTraits<128, bf16>::kSmemBytes);
    std::mt19937 rng(1234);
    check_split_keys_ring<4, 3>(rng);
    check_split_keys_ring<4, 4>(rng);
    check_split_keys_ring<4, 6>(rng);
    check_split_keys_ring<2, 3>(rng);
    check_split_shares(rng);
    check_sm90_fwd_key_mask<DefaultSm90FwdTraits<64, bf16>>("sm90 d64 key mask", rng);
    check_sm90_fwd_key_mask<DefaultSm90FwdTraits<128, bf16>>("sm90 d128 key mask", rng);
    check_sm90_fwd_key_mask<DefaultSm90FwdTraits<256, bf16>>("sm90 d256 key mask", rng);
    check_fwd_key_mask<DefaultFwdTraits<64, bf16>>("d64 key mask", rng);
    check_fwd_key_mask<DefaultFwdTraits<128, bf16>>("d128 key mask", rng);
    check_fwd_key_mask<DefaultFwdTraits<256, bf16>>("d256 key mask", rng);
    check_fwd_key_mask<SplitKeysDecodeTraits<128, bf16>::Warp>("d128 split-keys warp key mask", rng);
    check_inference_work_items(rng);
    check_block_ranges<16, 16>(rng);
    check_block_ranges<16, 32>(rng);
    check_packed_block_ranges<16, 16>(rng);
    check_block_ranges<128, 64>(rng);
    check_block_ranges<128, 128>(rng);
    check_block_ranges<64, 64>(rng);
    check_block_ranges<64, 128>(rng);
    check_block_ranges<128, 32>(rng);
    check_block_ranges<192, 128>(rng); // the Hopper forward's tiles up to d64
    check_packed_block_ranges<64, 64>(rng);
    // The Hopper forward's consumers (64 rows each) within its tiles.
    check_row_blocks<192, 64, 128>(rng);
    check_row_blocks<128, 64, 128>(rng);
    check_row_blocks<128, 64, 64>(rng);
    check_tile_order(rng);
    std::printf(failures ? "FAILED: %d checks\n" : "all layout and range checks passed\n", failures);
    return failures ? 1 : 0;
}
