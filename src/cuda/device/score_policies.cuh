// What the forward kernel does to a block of scores besides the softmax: the sequence bounds of a
// CTA, which K/V blocks it visits and which of those need masking, the key mask, the score
// transform (softcap, ALiBi) and dropout. Each is a thin device wrapper over the shared semantics
// of core/problem.h (MaskSpec, transform_score) and include/flashattn/philox.h (DropoutRow).
#pragma once

#include "kernels/fwd_args.h"

#include <flashattn/philox.h>

#include <cute/tensor.hpp>

#include <climits>

namespace flashattn::cuda::kernels {

using namespace cute;

// Lengths and first rows of one sequence. cu_seqlens / seqused_k (and a KV cache's arrays) live in
// device memory that the host never validated, so every value read is clamped into its valid range
// (device_faults.h): a malformed array never sends an access outside q/k/v/out/lse. A value out of
// range is recorded in the device's fault record and marks the sequence `faulted`: the forward
// kernels then write NaN for its output and lse.
struct SequenceBounds {
    int q_len, k_len;        // q_len: rows of the CTA's tile space (the group's heads when packed)
    int64_t q_row0, k_row0;  // k_row0: first key row (KV cache: leftpad; paged: row in the table)
    int64_t k_batch = 0;     // batch entry of k/v (KV cache: cache_batch_idx[b])
    bool rows_are_heads = false; // GQA packing (seqlen_q == 1): tile row r is query head r of the group
    bool faulted = false;    // an index of this sequence was out of range

    // The mask and ALiBi are defined on query rows: with packed heads every tile row is query row 0
    // of a one-row problem.
    __host__ __device__ __forceinline__ int query_row(int row) const { return rows_are_heads ? 0 : row; }
    __host__ __device__ __forceinline__ int query_len() const { return rows_are_heads ? 1 : q_len; }
};

// Learnable sinks (FwdArgs::learnable_sink, null = none): each of this thread's rows of the online
// softmax (and of out_rows, O's accumulator as (rows, cols)) takes its query head's sink as one more
// key (OnlineSoftmax::absorb_sink), after the last K/V block; rows (m0 + row of `coords`, the
// thread's score coordinates) past q_len are left alone. Packed GQA rows are the heads h, h + 1,
// ...; else every row is head h. A row's sink must enter once: the caller adds it only to the state
// the others are merged into (split 0 of split-KV, warp 0 of the decode kernel's merge).
template <typename Softmax, typename OutRows, typename Coords>
__device__ __forceinline__ void absorb_sinks(Softmax& softmax, OutRows& out_rows, const FwdArgs& args,
                                             Coords const& coords, int h, bool rows_are_heads, int m0, int q_len,
                                             float exp_scale) {
    if (!args.learnable_sink) return;
    const bool holds_sum = get<1>(coords(0, 0)) == 0; // one lane of each quad (the lane with column 0)
    const float head_sink = rows_are_heads ? 0.0f : args.learnable_sink[h];
    CUTE_UNROLL
    for (int r = 0; r < size<0>(coords); ++r) {
        const int i = m0 + get<0>(coords(r, 0));
        if (i < q_len)
            softmax.absorb_sink(r, rows_are_heads ? args.learnable_sink[h + i] : head_sink, exp_scale, holds_sum,
                                out_rows);
    }
}

// Rows [start, end) of a packed tensor, as read from cu_seqlens[b] and [b + 1]: cu[0] = 0, cu[b] <=
// cu[b + 1] <= total, at most max_len rows. Returns the first row; `len` the (clamped) number of rows.
__device__ __forceinline__ int64_t checked_rows(int32_t start, int32_t end, int b, int64_t total, int64_t max_len,
                                                FaultArg arg, DeviceFault* fault, bool& faulted, int64_t& len) {
    const int64_t row0 = checked_index(fault, faulted, arg, b, b, start, 0, b == 0 ? 0 : total);
    const int64_t row1 = checked_index(fault, faulted, arg, b, b + 1, end, row0, min(total, row0 + max_len));
    len = row1 - row0;
    return row0;
}

// A sequence's rows and keys from the index arrays in device memory. Every value is read before any
// is checked: a check's fault report is a call the compiler cannot move a load across, so checking
// each value as it arrives would put the reads' latencies one after another at the start of every CTA.
template <bool kInference = false>
__device__ __forceinline__ SequenceBounds sequence_bounds(const FwdArgs& args, int b) {
    const bool varlen = args.cu_seqlens_q != nullptr;
    const int32_t q_start = varlen ? args.cu_seqlens_q[b] : 0, q_end = varlen ? args.cu_seqlens_q[b + 1] : 0;
    const int32_t k_start = varlen ? args.cu_seqlens_k[b] : 0, k_end = varlen ? args.cu_seqlens_k[b + 1] : 0;
    const int32_t used_k = args.seqused_k ? args.seqused_k[b] : 0;
    int32_t cache_len = 0, leftpad = 0, cache_entry = b;
    if constexpr (kInference) {
        if (args.cache_seqlens) {
            cache_len = args.cache_seqlens[b];
            if (args.cache_leftpad) leftpad = args.cache_leftpad[b];
            if (args.cache_batch_idx) cache_entry = args.cache_batch_idx[b];
        }
    }

    SequenceBounds s{args.seqlen_q, args.seqlen_k, 0, 0};
    s.k_batch = b;
    const bool paged = kInference && args.block_table != nullptr;
    if (varlen) {
        int64_t q_len, k_len;
        s.q_row0 = checked_rows(q_start, q_end, b, args.total_q, args.seqlen_q, FaultArg::cu_seqlens_q, args.fault,
                                s.faulted, q_len);
        // Paged: cu_seqlens_k gives only lengths (rows start at 0 of the table); total_k bounds nothing.
        const int64_t k0 = checked_rows(k_start, k_end, b, paged ? int64_t(INT_MAX) : args.total_k, args.seqlen_k,
                                        FaultArg::cu_seqlens_k, args.fault, s.faulted, k_len);
        s.k_row0 = paged ? 0 : k0;
        s.q_len = int(q_len);
        s.k_len = int(k_len);
    }
    if (args.seqused_k) s.k_len = int(checked_index(args.fault, s.faulted, FaultArg::seqused_k, b, 0, used_k, 0, s.k_len));
    if constexpr (kInference) {
        if (args.cache_seqlens) { // keys are cache rows [leftpad, c + seqlen_new) (docs/semantics.md)
            const int c = int(checked_index(args.fault, s.faulted, FaultArg::cache_seqlens, b, 0, cache_len, 0,
                                            args.seqlen_k - args.seqlen_new));
            const int pad =
                args.cache_leftpad ? int(checked_index(args.fault, s.faulted, FaultArg::cache_leftpad, b, 0, leftpad, 0, c))
                                   : 0;
            s.k_row0 = pad;
            s.k_len = c + args.seqlen_new - pad;
            if (args.cache_batch_idx)
                s.k_batch = checked_index(args.fault, s.faulted, FaultArg::cache_batch_idx, b, 0, cache_entry, 0,
                                          args.cache_entries - 1);
        }
        if (args.pack_gqa) {
            s.q_len = args.heads_per_kv_head;
            s.rows_are_heads = true;
        }
    }
    return s;
}

// The K/V blocks query block [m0, m0 + kBlockM) visits, [n_begin, n_end), and the sub-range
// [unmasked_begin, unmasked_end) whose every (row, key) pair is allowed: there the mask is skipped.
// Blocks are visited from the last down, so the masked blocks at the diagonal and the ragged
// tail come first and the left edge of a local window last.
struct KvBlockRange {
    int n_begin, n_end;
    int unmasked_begin, unmasked_end;
};

template <int kBlockM, int kBlockN>
__host__ __device__ __forceinline__ KvBlockRange kv_block_range(const MaskSpec& mask, const SequenceBounds& s, int m0) {
    // Without a window every row sees [0, k_len): none of the 64-bit window arithmetic below (~80
    // uniform instructions a tile in the Hopper forward).
    if (!mask.is_local()) return KvBlockRange{0, (s.k_len + kBlockN - 1) / kBlockN, 0, s.k_len / kBlockN};
    const int64_t first_row = s.query_row(m0);
    const int64_t last_row = s.query_row(min(m0 + kBlockM, s.q_len) - 1);
    // Columns [begin, end) allowed for some row of the block, and for every row of the block.
    const KeyRange first = mask.keys_for_row(first_row, s.query_len(), s.k_len);
    const KeyRange last = mask.keys_for_row(last_row, s.query_len(), s.k_len);
    const int64_t any_begin = max(min(first.begin, last.begin), int64_t(0)); // window edges move with the row
    const int64_t any_end = min(max(first.end, last.end), int64_t(s.k_len));
    const int64_t all_begin = max(first.begin, last.begin);
    const int64_t all_end = min(first.end, last.end);

    KvBlockRange r;
    r.n_begin = int(any_begin / kBlockN);
    r.n_end = any_end > any_begin ? int((any_end + kBlockN - 1) / kBlockN) : r.n_begin;
    // Fully allowed blocks: the first block starting at or after all_begin, up to the last block
    // ending at or before all_end.
    r.unmasked_begin = all_begin <= 0 ? 0 : int((all_begin + kBlockN - 1) / kBlockN);
    r.unmasked_end = all_end <= 0 ? 0 : int(all_end / kBlockN);
    return r;
}

// How many rows before row 0 a sequence's first tile of kBlockM rows starts where the tiles are
// aligned to its end (the Hopper forward under a mask with a right edge): its tiles then end at the
// sequence's last 64-row block, and the first holds the rows that are left over.
template <int kBlockM>
__host__ __device__ __forceinline__ int end_aligned_shift(int q_len) {
    return (kBlockM - (q_len + 63) / 64 * 64 % kBlockM) % kBlockM;
}

// The key blocks that the rows [m0, m0 + kRows) of a tile whose blocks are `tile` see: under a
// causal or local mask a sub-range of the tile's (the top rows of a tile taller than a key block
// end a block or more before its bottom rows), with its own fully allowed blocks; rows past the
// sequence's end, or before its first row (an end-aligned first tile), see none (an empty range at
// tile.n_begin).
template <int kRows, int kBlockN>
__host__ __device__ __forceinline__ KvBlockRange row_blocks(const MaskSpec& mask, const SequenceBounds& s,
                                                            const KvBlockRange& tile, int m0) {
    KvBlockRange own = tile;
    if (m0 >= s.q_len || m0 + kRows <= 0) {
        own.n_end = tile.n_begin;
    } else if (mask.is_local()) {
        own = kv_block_range<kRows, kBlockN>(mask, s, m0);
        own.n_begin = max(own.n_begin, tile.n_begin);
        own.n_end = min(own.n_end, tile.n_end);
    }
    if (own.n_end <= own.n_begin) own.n_begin = own.n_end = tile.n_begin;
    return own;
}

// Split-KV: split `split` of `num_splits` visits an equal share of the range's blocks (the last
// share may be short or empty); the mask decisions stay per block.
__host__ __device__ __forceinline__ KvBlockRange split_share(KvBlockRange range, int split, int num_splits) {
    const int per_split = (range.n_end - range.n_begin + num_splits - 1) / num_splits;
    const int begin = range.n_begin + split * per_split;
    range.n_end = max(min(range.n_end, begin + per_split), begin);
    range.n_begin = begin;
    return range;
}

// An index range bound (64-bit, possibly "unbounded") relative to a thread's first row or column,
// clamped into int: the fragment's offsets are small, so the clamp changes no decision.
__host__ __device__ __forceinline__ int in_thread_frame(int64_t bound, int64_t thread_first) {
    return int(max(min(bound - thread_first, int64_t(1) << 30), -(int64_t(1) << 30)));
}

// The first n bits (n in [0, 32]).
__host__ __device__ __forceinline__ uint32_t low_bits(int n) {
    return n >= 32 ? 0xffffffffu : (1u << n) - 1u;
}

// Whether a thread's values along mode kMode of a fragment view sit at indices (rows for mode 0,
// columns for 1) first + 8q + p (value v = 2q + p, p = 0 or 1), in every row and column:
// mma.sync's and wgmma's accumulators hold pairs of neighbouring columns 8 apart (and the Hopper
// backward's transposed views, pairs of query rows). The offsets are compile-time constants once
// folded, so this is too.
template <int kMode, typename Coords>
__host__ __device__ __forceinline__ bool values_in_pairs(Coords const& coords) {
    const int first = get<kMode>(coords(0, 0));
    bool pairs = true;
    CUTE_UNROLL
    for (int r = 0; r < size<0>(coords); ++r) {
        CUTE_UNROLL
        for (int c = 0; c < size<1>(coords); ++c) {
            const int v = kMode == 0 ? r : c;
            pairs = pairs && get<kMode>(coords(r, c)) - first == 8 * (v / 2) + v % 2;
        }
    }
    return pairs;
}

// On such a mode the values below a bound e (relative to its first index) are its first
// ((e + 7) >> 3) + ((e + 6) >> 3) (the indices 8q below e, then the indices 8q + 1): as bits.
template <int kValues>
__host__ __device__ __forceinline__ uint32_t pair_values_below(int e) {
    e = min(max(e, 0), 4 * kValues); // past the last index (4 kValues - 7) every value counts
    return low_bits(((e + 7) >> 3) + ((e + 6) >> 3));
}

// The keys a thread's rows may see in the block at column n0, as bits: bit c of entry r says value
// (r, c) of the fragment view `coords` is allowed (at most 32 values a row). Applying them
// (apply_row_key_bits) is a bit test and a select a value, the bit tests mostly R2P, seven at a time.
// Compared with both ends of a row's range instead, the 64 values of a 64 x 128 block took ~8
// instructions each: ptxas evaluated the compares ahead of the scores' wait, packed the results into
// registers and unpacked them again (the d64 Hopper forward's masked step: 1,051 instructions, 432
// of them between the turn's barrier and its products; with the bits 671, and 58 in the turn).
template <typename Coords>
__host__ __device__ __forceinline__ auto row_key_bits(Coords const& coords, const MaskSpec& mask,
                                                      const SequenceBounds& s, int m0, int n0) {
    constexpr int kRows = decltype(size<0>(coords))::value, kCols = decltype(size<1>(coords))::value;
    static_assert(kCols <= 32, "one 32-bit word of bits a row");
    const int col0 = get<1>(coords(0, 0));
    // Bring a row's range into this thread's column frame; int is enough there.
    const int64_t first = int64_t(n0) + col0;
    const bool pairs = values_in_pairs<1>(coords);
    cute::array<uint32_t, kRows> bits;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
        const KeyRange keys = mask.keys_for_row(s.query_row(m0 + get<0>(coords(r, 0))), s.query_len(), s.k_len);
        const int begin = in_thread_frame(keys.begin, first), end = in_thread_frame(keys.end, first);
        if (pairs) {
            bits[r] = pair_values_below<kCols>(end) & ~pair_values_below<kCols>(begin);
        } else {
            bits[r] = 0;
            CUTE_UNROLL
            for (int c = 0; c < kCols; ++c) {
                const int j = get<1>(coords(r, c)) - col0; // a constant once folded
                bits[r] |= uint32_t(j >= begin && j < end) << c;
            }
        }
    }
    return bits;
}

template <typename Scores, typename Bits>
__host__ __device__ __forceinline__ void apply_row_key_bits(Scores& scores, Bits const& bits) {
    CUTE_UNROLL
    for (int r = 0; r < size<0>(scores); ++r) {
        CUTE_UNROLL
        for (int c = 0; c < size<1>(scores); ++c)
            if (!(bits[r] & (1u << c))) scores(r, c) = -INFINITY;
    }
}

// Set disallowed (row, key) scores to -inf; only called on blocks outside the unmasked range.
// Indices are compared relative to this thread's first row and column, so that each compare is
// against a compile-time offset: absolute indices would be precomputed into one register each (and
// spilled, in kernels at the register limit). The allowed set is a range of keys per query row
// (MaskSpec::keys_for_row) and, the same set seen the other way, a range of query rows per key;
// a thread's fragment takes the ranges along its shorter mode: per row in the forward's (rows x
// keys) fragments (2 rows x 2N keys), per key in the Hopper backward's transposed views (16 query
// rows x 2 keys), where 16 per-row ranges of 64-bit arithmetic cost ~740 instructions a masked
// block at d128 (2.1x an unmasked one, SASS; the per-key form: 2 ranges).
template <typename Scores, typename Coords>
__host__ __device__ __forceinline__ void apply_key_mask_by_row(Scores& scores, Coords const& coords,
                                                               const MaskSpec& mask, const SequenceBounds& s, int m0,
                                                               int n0) {
    if constexpr (decltype(size<1>(scores))::value <= 32) {
        apply_row_key_bits(scores, row_key_bits(coords, mask, s, m0, n0));
    } else {
        const int col0 = get<1>(coords(0, 0));
        const int64_t first = int64_t(n0) + col0;
        CUTE_UNROLL
        for (int r = 0; r < size<0>(scores); ++r) {
            const KeyRange keys = mask.keys_for_row(s.query_row(m0 + get<0>(coords(r, 0))), s.query_len(), s.k_len);
            const int begin = in_thread_frame(keys.begin, first), end = in_thread_frame(keys.end, first);
            CUTE_UNROLL
            for (int c = 0; c < size<1>(scores); ++c) {
                const int j = get<1>(coords(r, c)) - col0; // a constant once folded
                if (j < begin || j >= end) scores(r, c) = -INFINITY;
            }
        }
    }
}

// Query rows i that may see key j (MaskSpec::keys_for_row solved for i, with d = i + k_len - q_len):
// j < k_len, j >= d - window_left, j <= d + window_right, i.e. i in [j + q_len - k_len -
// window_right, j + q_len - k_len + window_left] (a side unbounded where its window is), as an
// inclusive range [first, last] of query indices; empty (first > last) when j >= k_len.
struct QueryRange {
    int64_t first, last;
};
__host__ __device__ __forceinline__ QueryRange queries_for_key(const MaskSpec& mask, int64_t j, int64_t q_len,
                                                                int64_t k_len) {
    constexpr int64_t kUnbounded = int64_t(1) << 40;
    if (j >= k_len) return QueryRange{kUnbounded, -kUnbounded};
    const int64_t diagonal_row = j + q_len - k_len; // the query row whose diagonal key is j
    return QueryRange{mask.window_right >= 0 ? diagonal_row - mask.window_right : -kUnbounded,
                      mask.window_left >= 0 ? diagonal_row + mask.window_left : kUnbounded};
}

// Scores of key column c outside query rows [first, last] (counted from the thread's first row) to
// -inf: as row_key_bits, a key's allowed rows as bits where they come in pairs 8 apart and fit a word.
template <typename Scores, typename Coords>
__host__ __device__ __forceinline__ void mask_key_column(Scores& scores, Coords const& coords, int c, bool pairs,
                                                         bool rows_are_heads, int first, int last) {
    constexpr int kRows = decltype(size<0>(scores))::value;
    if constexpr (kRows <= 32) {
        if (pairs && !rows_are_heads) {
            const uint32_t allowed = pair_values_below<kRows>(last + 1) & ~pair_values_below<kRows>(first);
            CUTE_UNROLL
            for (int r = 0; r < kRows; ++r)
                if (!(allowed & (1u << r))) scores(r, c) = -INFINITY;
            return;
        }
    }
    const int row0 = get<0>(coords(0, 0));
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
        const int i = rows_are_heads ? 0 : get<0>(coords(r, c)) - row0; // a constant once folded
        if (i < first || i > last) scores(r, c) = -INFINITY;
    }
}

template <typename Scores, typename Coords>
__host__ __device__ __forceinline__ void apply_key_mask_by_key(Scores& scores, Coords const& coords,
                                                               const MaskSpec& mask, const SequenceBounds& s, int m0,
                                                               int n0) {
    const bool pairs = values_in_pairs<0>(coords);
    // The thread's row frame (packed heads: every row is query 0).
    const int64_t first_row = s.rows_are_heads ? 0 : int64_t(m0) + get<0>(coords(0, 0));
    CUTE_UNROLL
    for (int c = 0; c < size<1>(scores); ++c) {
        const QueryRange rows = queries_for_key(mask, int64_t(n0) + get<1>(coords(0, c)), s.query_len(), s.k_len);
        mask_key_column(scores, coords, c, pairs, s.rows_are_heads, in_thread_frame(rows.first, first_row),
                        in_thread_frame(rows.last, first_row));
    }
}

// A key's query rows [first, last] (queries_for_key) clamped to [-1, 2^30], exact for every row a
// block can hold (as in_thread_frame), in 32 bits. They depend on the key, not on the query block:
// the Hopper backward's key block stays for its whole walk over query blocks, so it takes them once
// per key block (tile_key_queries) and each masked block only moves them into its row frame
// (apply_tile_key_mask): at d64 the masked block 836 -> 739 instructions.
struct KeyQueries {
    int first, last;
};
template <typename Coords>
__host__ __device__ __forceinline__ auto tile_key_queries(Coords const& coords, const MaskSpec& mask,
                                                          const SequenceBounds& s, int n0) {
    constexpr int kCols = decltype(size<1>(coords))::value;
    constexpr int64_t kFar = int64_t(1) << 30;
    cute::array<KeyQueries, kCols> queries;
    CUTE_UNROLL
    for (int c = 0; c < kCols; ++c) {
        const QueryRange rows = queries_for_key(mask, int64_t(n0) + get<1>(coords(0, c)), s.query_len(), s.k_len);
        queries[c] = KeyQueries{int(min(max(rows.first, int64_t(-1)), kFar)), int(min(max(rows.last, int64_t(-1)), kFar))};
    }
    return queries;
}
// apply_key_mask_by_key from a key block's KeyQueries, for the query block at row m0.
template <typename Scores, typename Coords, typename Queries>
__host__ __device__ __forceinline__ void apply_tile_key_mask(Scores& scores, Coords const& coords,
                                                             Queries const& queries, const SequenceBounds& s, int m0) {
    const bool pairs = values_in_pairs<0>(coords);
    const int first_row = s.rows_are_heads ? 0 : m0 + get<0>(coords(0, 0));
    CUTE_UNROLL
    for (int c = 0; c < size<1>(scores); ++c)
        mask_key_column(scores, coords, c, pairs, s.rows_are_heads, queries[c].first - first_row,
                        queries[c].last - first_row);
}

template <typename Scores, typename Coords>
__host__ __device__ __forceinline__ void apply_key_mask(Scores& scores, Coords const& coords, const MaskSpec& mask,
                                                        const SequenceBounds& s, int m0, int n0) {
    if constexpr (decltype(size<0>(scores))::value > decltype(size<1>(scores))::value) {
        apply_key_mask_by_key(scores, coords, mask, s, m0, n0);
    } else {
        apply_key_mask_by_row(scores, coords, mask, s, m0, n0);
    }
}

// One block's key mask as a callable on (scores, coords), for code shared by kernels that take it
// differently (bwd_policies.cuh's recompute_probs): from the mask spec, or from a key block's
// KeyQueries (the Hopper backward's). Both capture by value: with references into the kernel's
// sequence bounds ptxas grew the Hopper backward's extras loops by 3-4% (64-bit address arithmetic).
__host__ __device__ __forceinline__ auto block_key_mask(const MaskSpec& mask, const SequenceBounds& s, int m0, int n0) {
    return [mask, s, m0, n0](auto& scores, auto const& coords) { apply_key_mask(scores, coords, mask, s, m0, n0); };
}
template <typename Queries>
__host__ __device__ __forceinline__ auto tile_key_mask(Queries const& queries, const SequenceBounds& s, int m0) {
    return [queries, s, m0](auto& scores, auto const& coords) { apply_tile_key_mask(scores, coords, queries, s, m0); };
}

// Scores in natural units: scale, then softcap, then ALiBi, exactly core/problem.h's transform_score.
template <typename Scores, typename Coords>
__device__ __forceinline__ void apply_score_transform(Scores& scores, Coords const& coords, const FwdArgs& args,
                                                 float alibi_slope, const SequenceBounds& s, int m0, int n0) {
    CUTE_UNROLL
    for (int r = 0; r < size<0>(scores); ++r) {
        const int64_t i = s.query_row(m0 + get<0>(coords(r, 0)));
        CUTE_UNROLL
        for (int c = 0; c < size<1>(scores); ++c) {
            const int64_t j = n0 + get<1>(coords(r, c));
            scores(r, c) = transform_score<float>(scores(r, c) * args.scale, args.softcap, alibi_slope, i, j,
                                                  s.query_len(), s.k_len);
        }
    }
}

// dropped(p) on each element of a (query row, key) view that dropout drops. The accumulators hold
// neighbouring column pairs (j, j+1), j even, so one Philox call (four columns) serves a pair; the
// choice of its words follows DropoutRow::bits_for_column (the forward and both backward kernels).
template <typename Probs, typename Coords, typename Dropped>
__device__ __forceinline__ void for_each_dropped(Probs& probs, Coords const& coords, const FwdArgs& args,
                                                 const DropoutKey& key, int b, int h, int m0, int n0,
                                                 Dropped&& dropped) {
    CUTE_UNROLL
    for (int r = 0; r < size<0>(probs); ++r) {
        const DropoutRow rng(key.seed, key.offset, b, args.num_heads, h, m0 + get<0>(coords(r, 0)));
        CUTE_UNROLL
        for (int c = 0; c < size<1>(probs); c += 2) {
            const uint32_t j = uint32_t(n0 + get<1>(coords(r, c)));
            const PhiloxBits bits = rng.bits_for_column_group(j >> 2);
            const bool high_pair = (j & 2u) != 0;
            const uint32_t w0 = high_pair ? bits.z : bits.x;
            const uint32_t w1 = high_pair ? bits.w : bits.y;
            if (w0 >= args.keep_threshold) dropped(probs(r, c));
            if (w1 >= args.keep_threshold) dropped(probs(r, c + 1));
        }
    }
}

// Zero the dropped probabilities (the 1/(1-p) rescale is folded into the final normalisation).
template <typename Probs, typename Coords>
__device__ __forceinline__ void apply_dropout(Probs& probs, Coords const& coords, const FwdArgs& args,
                                              const DropoutKey& key, int b, int h, int m0, int n0) {
    for_each_dropped(probs, coords, args, key, b, h, m0, n0, [](float& p) { p = 0.0f; });
}

} // namespace flashattn::cuda::kernels
