// apply_key_mask on a thread's fragment view, checked on the host against MaskSpec::allowed
// (layout_check.cu: the forward kernels' (row, key) views; bwd_layout_check.cu: the Hopper
// backward's (query, key) views).
#pragma once

#include "device/score_policies.cuh"
#include "host_check.h"

#include <random>

using namespace cute;
using namespace flashattn;
using namespace flashattn::cuda::kernels;

// apply_key_mask on a thread's fragment view against MaskSpec::allowed, element by element, over
// random masks (causal, local, none, windows past any length), lengths, block offsets and packed
// heads, for every thread of `threads`: both forms (ranges per key, which the Hopper backward's
// 16 x 2 (query, key) views take, and ranges per row, as bits where a row has at most 32 values),
// and the key block's keys' query rows taken once (tile_key_queries, the Hopper backward's at d64),
// must mask exactly the disallowed (query, key) pairs. pairs_mode 1 (0): the view's columns (rows)
// come in pairs 8 apart (values_in_pairs), so that the mask takes its short form, as bits.
template <typename View, typename MakeView>
void check_key_mask(const char* name, int threads, int block_m, int block_n, MakeView make_view,
                    std::mt19937& rng, int pairs_mode = -1) {
    std::uniform_int_distribution<int> len(1, 700), window(-1, 200), coin(0, 3);
    for (int trial = 0; trial < 300; ++trial) {
        SequenceBounds s{len(rng), len(rng), 0, 0};
        if (coin(rng) == 0) s.q_len = s.k_len;
        s.rows_are_heads = coin(rng) == 0 && trial % 7 == 0;
        MaskSpec mask{window(rng), window(rng)};
        if (coin(rng) == 0) mask = MaskSpec{-1, 0};  // causal
        if (coin(rng) == 0) mask = MaskSpec{-1, -1}; // none
        if (trial % 11 == 0) mask.window_left = int64_t(1) << 40; // past every length (64-bit ends)
        if (trial % 13 == 0) mask.window_right = int64_t(1) << 40;
        const int m0 = block_m * std::uniform_int_distribution<int>(0, s.q_len / block_m + 1)(rng);
        const int n0 = block_n * std::uniform_int_distribution<int>(0, s.k_len / block_n + 1)(rng);
        for (int tid = 0; tid < threads; ++tid) {
            auto coords = make_view(tid);
            if (trial == 0 && pairs_mode >= 0)
                CHECK(pairs_mode == 0 ? values_in_pairs<0>(coords) : values_in_pairs<1>(coords),
                      "%s: thread %d: the values along mode %d are not in pairs 8 apart", name, tid, pairs_mode);
            auto by_key = make_tensor<float>(make_layout(shape(coords)));
            auto by_row = make_tensor<float>(make_layout(shape(coords)));
            auto chosen = make_tensor<float>(make_layout(shape(coords)));
            fill(by_key, 0.0f);
            fill(by_row, 0.0f);
            fill(chosen, 0.0f);
            apply_key_mask_by_key(by_key, coords, mask, s, m0, n0);
            apply_key_mask_by_row(by_row, coords, mask, s, m0, n0);
            apply_key_mask(chosen, coords, mask, s, m0, n0);
            auto key_tiled = make_tensor<float>(make_layout(shape(coords)));
            fill(key_tiled, 0.0f);
            apply_tile_key_mask(key_tiled, coords, tile_key_queries(coords, mask, s, n0), s, m0);
            for (int r = 0; r < size<0>(coords); ++r)
                for (int c = 0; c < size<1>(coords); ++c) {
                    const int64_t i = s.query_row(m0 + get<0>(coords(r, c))), j = n0 + get<1>(coords(r, c));
                    const bool masked = !mask.allowed(i, j, s.query_len(), s.k_len);
                    CHECK((by_key(r, c) == -INFINITY) == masked && (by_row(r, c) == -INFINITY) == masked &&
                              (chosen(r, c) == -INFINITY) == masked && (key_tiled(r, c) == -INFINITY) == masked,
                          "%s: thread %d, q_len %d k_len %d heads %d window (%lld, %lld) m0 %d n0 %d: (%lld, %lld) "
                          "masked %d, by key %d, by row %d, by tile key %d",
                          name, tid, s.q_len, s.k_len, int(s.rows_are_heads), (long long)mask.window_left,
                          (long long)mask.window_right, m0, n0, (long long)i, (long long)j, int(masked),
                          int(by_key(r, c) == -INFINITY), int(by_row(r, c) == -INFINITY),
                          int(key_tiled(r, c) == -INFINITY));
                }
        }
    }
}

