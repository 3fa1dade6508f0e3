// What the backward does to a block of scores besides the products: which query blocks a key block
// meets and which of those need the mask, the score transform with its derivative (softcap), and
// the dropout mark. Semantics come from core/problem.h and include/flashattn/philox.h, exactly as
// in the forward (score_policies.cuh), so the backward recomputes the forward's P bit for bit.
#pragma once

#include <type_traits>

#include "kernels/bwd_args.h"
#include "device/fast_exp2.cuh"
#include "device/score_policies.cuh"

#include <flashattn/philox.h>

#include <cute/tensor.hpp>

namespace flashattn::cuda::kernels {

using namespace cute;

// Adds a pair of neighbouring fp32 values (8-byte aligned) to global memory without a return value.
__device__ __forceinline__ void red_add_pair(float* address, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2*>(address), make_float2(x, y));
#else
    atomicAdd(address, x);
    atomicAdd(address + 1, y);
#endif
}

// red_add_pair as an explicit reduction on sm_90 (atomicAdd of a float2 is an atom with a result
// that ptxas may or may not drop); used by the d256 Hopper backward's dQ adds.
__device__ __forceinline__ void red_add_pair_v2(float* address, float x, float y) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" ::"l"(address), "f"(x), "f"(y) : "memory");
#else
    red_add_pair(address, x, y);
#endif
}

// Two neighbouring fp32 values of the dK / dV scratch (8-byte aligned): stored, or with args.dkv_add
// added (the scratch then holds a KV head's rows, which its query heads add to).
__device__ __forceinline__ void put_dkv_pair(const BwdArgs& args, float* at, float x, float y) {
    if (args.dkv_add) red_add_pair_v2(at, x, y);
    else *reinterpret_cast<float2*>(at) = make_float2(x, y);
}

// dK and dV of one key block, in fp32, to the per-query-head scratch (GQA, odd dK/dV layouts: the
// finishing kernel sums each KV head's query heads in order), or with args.dkv_add added to the KV
// head's rows (h is then that KV head). first_key_row: the block's first row among all sequences'
// keys; rows at or past rows_valid are not written. Accumulator registers 2t, 2t + 1 are neighbouring
// columns (tdKVc: their (row, column)).
template <int kHeadDim, typename Acc, typename Coords>
__device__ __forceinline__ void store_dkv_scratch(const BwdArgs& args, int h, int64_t first_key_row, Acc const& acc_dk,
                                                  Acc const& acc_dv, Coords const& tdKVc, int rows_valid) {
    const int64_t row0 = (int64_t(h) * args.k_rows_total + first_key_row) * kHeadDim;
    float* const dk_rows = args.dk_accum + row0;
    float* const dv_rows = args.dv_accum + row0;
    CUTE_UNROLL
    for (int t = 0; t < size(acc_dk); t += 2) {
        const int row = get<0>(tdKVc(t)), col = get<1>(tdKVc(t));
        if (row < rows_valid) {
            put_dkv_pair(args, dk_rows + row * kHeadDim + col, acc_dk(t), acc_dk(t + 1));
            put_dkv_pair(args, dv_rows + row * kHeadDim + col, acc_dv(t), acc_dv(t + 1));
        }
    }
}

// The same where dK and dV have shapes of their own (a value head dim unlike the query's): rows of
// kRowFloats floats (the scratch's accum_cols) for both, tdKc / tdVc the (row, column) of each; or,
// kTransposed (dK^T, dV^T accumulators), the (column, row) of each, registers 2t and 2t + 1 then
// neighbouring rows, stored one float each.
template <int kRowFloats, bool kTransposed = false, typename AccK, typename AccV, typename CoordsK, typename CoordsV>
__device__ __forceinline__ void store_dkv_scratch(const BwdArgs& args, int h, int64_t first_key_row, AccK const& acc_dk,
                                                  AccV const& acc_dv, CoordsK const& tdKc, CoordsV const& tdVc,
                                                  int rows_valid) {
    const int64_t row0 = (int64_t(h) * args.k_rows_total + first_key_row) * kRowFloats;
    auto store = [&](float* rows, auto const& acc, auto const& coords) {
        if constexpr (kTransposed) {
            // One loop per form, chosen once, each element at the thread's first one plus a constant:
            // a store-or-add per element at its own computed address made ptxas spill ~1.4 KB more
            // in this epilogue (192 / 128).
            const int first_col = get<0>(coords(0)), first_row = get<1>(coords(0));
            float* const first = rows + first_row * kRowFloats + first_col;
            auto each = [&](auto put) {
                CUTE_UNROLL
                for (int t = 0; t < size(acc); ++t) {
                    const int drow = get<1>(coords(t)) - first_row, dcol = get<0>(coords(t)) - first_col;
                    if (first_row + drow < rows_valid) put(first + drow * kRowFloats + dcol, acc(t));
                }
            };
            if (args.dkv_add) each([](float* at, float x) { atomicAdd(at, x); }); // (result unused: a reduction)
            else each([](float* at, float x) { *at = x; });
        } else {
            CUTE_UNROLL
            for (int t = 0; t < size(acc); t += 2) {
                const int row = get<0>(coords(t)), col = get<1>(coords(t));
                if (row < rows_valid) put_dkv_pair(args, rows + row * kRowFloats + col, acc(t), acc(t + 1));
            }
        }
    };
    store(args.dk_accum + row0, acc_dk, tdKc);
    store(args.dv_accum + row0, acc_dv, tdVc);
}

// Adds four neighbouring fp32 values (16-byte aligned) to global memory without a return value.
__device__ __forceinline__ void red_add_quad(float* address, float4 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(address), "f"(v.x), "f"(v.y), "f"(v.z),
                 "f"(v.w)
                 : "memory");
#else
    red_add_pair(address, v.x, v.y);
    red_add_pair(address + 2, v.z, v.w);
#endif
}

// Rows of sequence b that k, v, dk, dv hold: the whole stored sequence, also past seqused_k (those
// keys get zero gradients). Clamped like sequence_bounds.
__device__ __forceinline__ int stored_k_rows(const FwdArgs& args, int b) {
    if (!args.cu_seqlens_k) return args.seqlen_k;
    const int64_t k0 = min(max(int64_t(args.cu_seqlens_k[b]), int64_t(0)), args.total_k);
    const int64_t k1 = min(max(int64_t(args.cu_seqlens_k[b + 1]), k0), args.total_k);
    return int(min(k1 - k0, int64_t(args.seqlen_k)));
}

// The query blocks [m_begin, m_end) that key block [n0, n0 + kBlockN) meets, and the sub-range
// [unmasked_begin, unmasked_end) in which every (row, key) pair is allowed (no mask needed; rows
// past q_len do not count: their P is zero through lse = +inf). Visited in increasing order, the
// masked blocks are at the two ends: the diagonal first, a local window's left edge last.
//
// Row i sees keys [max(0, i + off - left), min(k_len, i + off + right + 1)), off = k_len - q_len.
// Both ends grow with i, so the rows meeting [n0, n_last] form one interval:
//   i >= n0 - off - right (right >= 0),  i <= n_last - off + left (left >= 0);
// and a block of rows is fully allowed on a full key block when its first row reaches
// n0 + kBlockN - 1 and its last row does not start after n0.
struct QBlockRange {
    int m_begin, m_end;
    int unmasked_begin, unmasked_end;
};

template <int kBlockM, int kBlockN>
__host__ __device__ __forceinline__ QBlockRange q_block_range(const MaskSpec& mask, const SequenceBounds& s, int n0) {
    QBlockRange r{0, 0, 0, 0};
    if (s.q_len <= 0 || n0 >= s.k_len) return r;
    const int64_t off = int64_t(s.k_len) - s.q_len;
    const int64_t n_last = min(int64_t(n0) + kBlockN, int64_t(s.k_len)) - 1;
    int64_t row_lo = 0, row_hi = s.q_len - 1;
    if (mask.window_right >= 0) row_lo = max(row_lo, n0 - off - mask.window_right);
    if (mask.window_left >= 0) row_hi = min(row_hi, n_last - off + mask.window_left);
    if (row_lo > row_hi) return r;
    r.m_begin = int(row_lo / kBlockM);
    r.m_end = int(row_hi / kBlockM) + 1;
    if (int64_t(n0) + kBlockN > s.k_len) return r; // ragged key block: keys past k_len need the mask
    // First row allowed every key of the block, and last row allowed every key (floor/ceil in int64).
    const int64_t first_ok = mask.window_right >= 0 ? n0 + kBlockN - 1 - off - mask.window_right : INT64_MIN / 4;
    const int64_t last_ok = mask.window_left >= 0 ? n0 - off + mask.window_left : INT64_MAX / 4;
    const auto floor_div = [](int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); };
    const int64_t ub = first_ok <= 0 ? 0 : (first_ok + kBlockM - 1) / kBlockM;
    const int64_t ue = floor_div(last_ok + 1, kBlockM);
    r.unmasked_begin = int(max(min(ub, int64_t(r.m_end)), int64_t(r.m_begin)));
    r.unmasked_end = int(max(min(ue, int64_t(r.m_end)), int64_t(r.unmasked_begin)));
    return r;
}

// The key blocks whose q_block_range holds query block m, [n_begin, n_end): exactly the key blocks
// that add to block m's dQ (the ordered dQ of deterministic mode counts them, so a key block counted
// here that never adds, or one missing, would hang or misorder it). From q_block_range's interval of
// rows: key block n (keys [n0, n_last], n_last = min(n0 + kBlockN, k_len) - 1, n0 < k_len) meets
// the rows [first, last] of block m (last clipped to q_len) iff
//   n_last >= first + off - left (left >= 0)   and   n0 <= last + off + right (right >= 0),
// i.e. n >= floor((first + off - left) / kBlockN), with first + off - left < k_len, and
// n <= floor((last + off + right) / kBlockN), with last + off + right >= 0.
// tests/gpu/bwd_layout_check.cu checks it against q_block_range over random shapes and windows.
struct KeyBlockRange {
    int n_begin, n_end;
};

template <int kBlockM, int kBlockN>
__host__ __device__ __forceinline__ KeyBlockRange dq_key_blocks(const MaskSpec& mask, const SequenceBounds& s, int m) {
    KeyBlockRange r{0, 0};
    const int64_t first = int64_t(m) * kBlockM;
    if (s.k_len <= 0 || first >= s.q_len) return r;
    const int64_t last = min(first + kBlockM, int64_t(s.q_len)) - 1;
    const int64_t off = int64_t(s.k_len) - s.q_len;
    int64_t lo = 0, hi = (int64_t(s.k_len) + kBlockN - 1) / kBlockN;
    if (mask.window_left >= 0) {
        const int64_t x = first + off - mask.window_left;
        if (x >= s.k_len) return r;
        lo = x >= 0 ? x / kBlockN : 0;
    }
    if (mask.window_right >= 0) {
        const int64_t y = last + off + mask.window_right;
        if (y < 0) return r;
        hi = min(hi, y / kBlockN + 1);
    }
    if (hi > lo) r = KeyBlockRange{int(lo), int(hi)};
    return r;
}

// Multiply each probability by the softcap derivative at its score, d capped / d scaled =
// 1 - tanh^2, recovered from P itself rather than kept in registers through dP = dO V^T:
// log2 P + lse_log2 is the transformed score (in log2 units), adding the ALiBi term back gives the
// capped score, and capped / softcap is the tanh. Its error (a few ulp of the lse) is far below the
// 16-bit rounding of dS; P = 0 needs no derivative. Dropped probabilities (negated) keep their sign.
// `target` (the probabilities themselves, or dS = P (dP - dsum) computed from them, which leaves P
// as it is for dV) is what gets multiplied.
template <typename Target, typename Probs, typename Coords, typename Lse>
__device__ __forceinline__ void scale_by_softcap_derivative(Target& target, Probs const& probs, Coords const& coords,
                                                            const FwdArgs& args, float alibi_slope,
                                                            const SequenceBounds& s, int m0, int n0,
                                                            Lse const& lse_log2) {
    constexpr int kRows = decltype(size<0>(probs))::value;
    static_assert(!std::is_array_v<Lse> || std::extent_v<Lse> == kRows, "an lse per row of the view");
    constexpr float kLn2 = 0.6931471805599453f;
    const float inv_softcap = 1.0f / args.softcap;
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
        const int64_t i = m0 + get<0>(coords(r, 0));
        CUTE_UNROLL
        for (int c = 0; c < size<1>(probs); ++c) {
            const float p = probs(r, c);
            if (p == 0.0f) continue;
            // transform_score of a zero score with ALiBi only is exactly the ALiBi term.
            const float alibi = transform_score<float>(0.0f, 0.0f, alibi_slope, i, n0 + get<1>(coords(r, c)),
                                                       s.q_len, s.k_len);
            const float capped = (__log2f(fabsf(p)) + lse_log2[r]) * kLn2 - alibi;
            const float tanh_value = capped * inv_softcap;
            target(r, c) *= 1.0f - tanh_value * tanh_value;
        }
    }
}
template <typename Probs, typename Coords, typename Lse>
__device__ __forceinline__ void apply_softcap_derivative(Probs& probs, Coords const& coords, const FwdArgs& args,
                                                         float alibi_slope, const SequenceBounds& s, int m0,
                                                         int n0, Lse const& lse_log2) {
    scale_by_softcap_derivative(probs, probs, coords, args, alibi_slope, s, m0, n0, lse_log2);
}

// Mark the probabilities dropout dropped by negating them (P >= 0, so the sign is free to carry the
// mask from the P stage to the dS stage without registers); the forward's elements (for_each_dropped).
template <typename Probs, typename Coords>
__device__ __forceinline__ void negate_dropped(Probs& probs, Coords const& coords, const FwdArgs& args,
                                               const DropoutKey& key, int b, int h, int m0, int n0) {
    for_each_dropped(probs, coords, args, key, b, h, m0, n0, [](float& p) { p = -p; });
}

// P = exp2(S * exp_scale - lse_log2) in place on a (query row, key) view of the scores, after the
// score transform (extras kernels) and the key mask (masked blocks; key_mask(scores, coords), as
// score_policies.cuh's block_key_mask or tile_key_mask): the forward's probabilities, recomputed
// from its lse (lse_log2[r]: per row of the view, in log2 units; an array, or an object that reads
// it as it is used). Both backward kernels.
template <bool kMasked, bool kExtras, typename Scores, typename Coords, typename Lse, typename KeyMask>
__device__ __forceinline__ void recompute_probs(Scores& scores, Coords const& coords, const FwdArgs& fa,
                                                float alibi_slope, const SequenceBounds& seq, int m0, int n0,
                                                float exp_scale, Lse const& lse_log2, KeyMask&& key_mask) {
    constexpr int kRows = decltype(size<0>(scores))::value;
    static_assert(!std::is_array_v<Lse> || std::extent_v<Lse> == kRows, "an lse per row of the view");
    if constexpr (kExtras) {
        if (fa.transform_scores) apply_score_transform(scores, coords, fa, alibi_slope, seq, m0, n0);
    }
    if constexpr (kMasked) key_mask(scores, coords);
    CUTE_UNROLL
    for (int r = 0; r < kRows; ++r) {
        CUTE_UNROLL
        for (int c = 0; c < size<1>(scores); ++c) scores(r, c) = fast_exp2(fmaf(scores(r, c), exp_scale, -lse_log2[r]));
    }
}

} // namespace flashattn::cuda::kernels
