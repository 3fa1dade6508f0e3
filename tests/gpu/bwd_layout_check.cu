// Host-side checks of the backward kernel's index math (no GPU needed; CuTe layouts are host
// functions too):
//
//   nvcc -std=c++17 --expt-relaxed-constexpr -I include -I src -I src/cuda \
//        -isystem third_party/cutlass/include tests/gpu/bwd_layout_check.cu -o /tmp/bwd_layout_check \
//     && /tmp/bwd_layout_check
//
// For every backward tiling (the defaults and the tuning variants):
//   - each of the three warp grids (S/dP, dK/dV, dQ) covers its accumulator tile exactly once, and
//     registers 2t, 2t+1 hold (row, col), (row, col + 1) with col even (the dQ red.add pairs, the
//     dK/dV float2 stores and the dropout column pairs rely on it);
//   - rows_cols() of the S accumulator is a matrix (one row per r, one column per c);
//   - the transposed shared-memory views address the same element as the plain ones, and each dQ
//     slab of K^T is the first slab's layout at a fixed offset;
//   - the global <-> shared copies cover each tile exactly once.
// And q_block_range() against brute force over random shapes and windows: every query block that
// meets a key block is visited, and every block run without the mask is fully allowed.
#include "kernels/bwd_policies.cuh"
#include "kernels/bwd_traits.cuh"
#include "kernels/tile_ops.cuh"

#include "host_check.h"

#include <cstdio>
#include <map>
#include <random>
#include <utility>

using namespace cute;
using namespace flashattn;
using namespace flashattn::cuda::kernels;


template <typename Mma, int kRows, int kCols>
void check_grid(const char* name, int threads) {
    Mma mma;
    std::map<std::pair<int, int>, int> cover;
    for (int tid = 0; tid < threads; ++tid) {
        auto thr = mma.get_thread_slice(tid);
        Tensor c = thr.partition_C(make_identity_tensor(Shape<Int<kRows>, Int<kCols>>{}));
        for (int t = 0; t < size(c); ++t) cover[{get<0>(c(t)), get<1>(c(t))}]++;
        for (int t = 0; t < size(c); t += 2) {
            CHECK(get<1>(c(t)) % 2 == 0, "%s: register %d of thread %d has an odd column", name, t, tid);
            CHECK(get<0>(c(t + 1)) == get<0>(c(t)) && get<1>(c(t + 1)) == get<1>(c(t)) + 1,
                  "%s: registers %d, %d of thread %d are not neighbours in a row", name, t, t + 1, tid);
        }
    }
    CHECK(int(cover.size()) == kRows * kCols, "%s: covers %d of %d elements", name, int(cover.size()), kRows * kCols);
    for (auto& [rc, n] : cover) CHECK(n == 1, "%s: (%d, %d) held %d times", name, rc.first, rc.second, n);
}

template <typename Layout, typename LayoutT, int kRows, int kCols>
void check_transposed(const char* name) {
    Layout plain;
    LayoutT transposed;
    for (int i = 0; i < kRows; ++i)
        for (int j = 0; j < kCols; ++j)
            CHECK(plain(i, j) == transposed(j, i), "%s: (%d, %d) -> %d, transposed view -> %d", name, i, j,
                  int(plain(i, j)), int(transposed(j, i)));
}

template <typename Traits, typename Smem, int kRows>
void check_gmem_copy(const char* name) {
    constexpr int kHeadDim = Traits::kHeadDim;
    typename Traits::GmemLoad load;
    std::map<std::pair<int, int>, int> cover;
    for (int tid = 0; tid < Traits::kThreads; ++tid) {
        auto thr = load.get_thread_slice(tid);
        Tensor c = thr.partition_S(make_identity_tensor(Shape<Int<kRows>, Int<kHeadDim>>{}));
        for (int t = 0; t < size(c); ++t) cover[{get<0>(c(t)), get<1>(c(t))}]++;
    }
    CHECK(int(cover.size()) == kRows * kHeadDim, "%s: copy covers %d of %d", name, int(cover.size()), kRows * kHeadDim);
    for (auto& [rc, n] : cover) CHECK(n == 1, "%s: copy element (%d, %d) %d times", name, rc.first, rc.second, n);
}

template <typename Traits>
void check_traits() {
    constexpr int M = Traits::kBlockM, N = Traits::kBlockN, D = Traits::kHeadDim;
    char name[96];
    std::snprintf(name, sizeof(name), "d%d (%dx%d, %d warps, grids %d/%d/%d, %d dQ slabs)", D, M, N, Traits::kWarps,
                  Traits::kAtomMSdP, Traits::kAtomNKV, Traits::kAtomMQ, Traits::kDqSlabs);
    std::printf("checking %s, %d bytes of shared memory\n", name, Traits::kSmemBytes);
    check_grid<typename Traits::TiledMmaSdP, M, N>(name, Traits::kThreads);
    check_grid<typename Traits::TiledMmaKV, N, D>(name, Traits::kThreads);
    check_grid<typename Traits::TiledMmaQ, M, Traits::kDqCols>(name, Traits::kThreads);
    check_transposed<typename Traits::SmemLayoutQ, typename Traits::SmemLayoutQt, M, D>(name);
    check_transposed<typename Traits::SmemLayoutKV, typename Traits::SmemLayoutKt, N, D>(name);
    // dQ slab s of K^T is the first slab's layout kKtSlabElems * s elements further on.
    {
        typename Traits::SmemLayoutKt kt;
        typename Traits::SmemLayoutKtSlab slab;
        for (int s = 0; s < Traits::kDqSlabs; ++s)
            for (int d = 0; d < Traits::kDqCols; ++d)
                for (int n = 0; n < N; ++n)
                    CHECK(int(slab(d, n)) + s * Traits::kKtSlabElems == int(kt(s * Traits::kDqCols + d, n)),
                          "%s: K^T slab %d (%d, %d) -> %d, whole view -> %d", name, s, d, n,
                          int(slab(d, n)) + s * Traits::kKtSlabElems, int(kt(s * Traits::kDqCols + d, n)));
    }
    check_transposed<typename Traits::SmemLayoutPdS, typename Traits::SmemLayoutPdSt, M, N>(name);
    check_gmem_copy<Traits, typename Traits::SmemLayoutQ, M>(name);
    check_gmem_copy<Traits, typename Traits::SmemLayoutKV, N>(name);

    // rows_cols of the S accumulator: rows constant along r, columns along c.
    typename Traits::TiledMmaSdP mma;
    for (int tid = 0; tid < Traits::kThreads; ++tid) {
        Tensor cS = mma.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
        Tensor rc = make_tensor(cS.data(), rows_cols(cS.layout()));
        for (int r = 0; r < size<0>(rc); ++r)
            for (int c = 0; c < size<1>(rc); ++c) {
                CHECK(get<0>(rc(r, c)) == get<0>(rc(r, 0)), "%s: row varies along r=%d", name, r);
                CHECK(get<1>(rc(r, c)) == get<1>(rc(0, c)), "%s: column varies along c=%d", name, c);
            }
    }
}

// Brute force: does query row i see key j?
bool allowed(const MaskSpec& mask, int64_t i, int64_t j, int q_len, int k_len) {
    return j < k_len && mask.allowed(i, j, q_len, k_len);
}

template <int kBlockM, int kBlockN>
void check_q_block_range(std::mt19937& rng) {
    std::uniform_int_distribution<int> len(0, 400), window(-1, 150), coin(0, 3);
    for (int trial = 0; trial < 3000; ++trial) {
        SequenceBounds s{len(rng), len(rng), 0, 0};
        if (coin(rng) == 0) s.q_len = s.k_len; // square problems are common
        MaskSpec mask{window(rng), window(rng)};
        if (coin(rng) == 0) mask = MaskSpec{-1, 0};  // causal
        if (coin(rng) == 0) mask = MaskSpec{-1, -1}; // none
        for (int n0 = 0; n0 < s.k_len; n0 += kBlockN) {
            const QBlockRange r = q_block_range<kBlockM, kBlockN>(mask, s, n0);
            for (int m = 0; m * kBlockM < s.q_len; ++m) {
                bool any = false, all = true;
                for (int i = m * kBlockM; i < (m + 1) * kBlockM && i < s.q_len; ++i)
                    for (int j = n0; j < n0 + kBlockN; ++j) {
                        const bool ok = allowed(mask, i, j, s.q_len, s.k_len);
                        any |= ok;
                        all &= ok;
                    }
                const bool visited = m >= r.m_begin && m < r.m_end;
                const bool unmasked = m >= r.unmasked_begin && m < r.unmasked_end;
                CHECK(!any || visited, "q_len %d k_len %d window (%lld, %lld) key block %d: query block %d skipped",
                      s.q_len, s.k_len, (long long)mask.window_left, (long long)mask.window_right, n0 / kBlockN, m);
                CHECK(!unmasked || all,
                      "q_len %d k_len %d window (%lld, %lld) key block %d: query block %d run without the mask",
                      s.q_len, s.k_len, (long long)mask.window_left, (long long)mask.window_right, n0 / kBlockN, m);
                CHECK(!unmasked || visited, "unmasked block %d outside the visited range", m);
            }
        }
    }
}

template <int kHeadDim>
void check_tiling() {
    check_traits<DefaultBwdTraits<kHeadDim, cutlass::bfloat16_t>>();
}

// The tuning variants of src/cuda/CMakeLists.txt (FLASHATTN_CUDA_BWD_TILE_VARIANTS).
template <int D, int M, int N, int W, int S, int KV, int Q, int Slabs>
void check_variant() {
    check_traits<BwdTraits<D, M, N, W, S, KV, Q, Slabs, cutlass::bfloat16_t>>();
}

int main() {
    check_tiling<32>();
    check_tiling<64>();
    check_tiling<96>();
    check_tiling<128>();
    check_tiling<192>();
    check_tiling<256>();
    check_variant<64, 64, 128, 8, 2, 4, 4, 1>();
    check_variant<64, 128, 64, 8, 4, 2, 4, 1>();
    check_variant<128, 64, 128, 8, 2, 4, 2, 1>();
    check_variant<128, 64, 128, 8, 2, 2, 2, 1>();
    check_variant<128, 128, 64, 8, 4, 2, 2, 1>();
    check_variant<128, 64, 64, 8, 4, 2, 2, 1>();
    check_variant<256, 64, 64, 8, 4, 2, 2, 1>();
    check_variant<256, 64, 64, 8, 4, 2, 2, 4>();
    check_variant<256, 64, 64, 8, 2, 2, 2, 2>();
    std::mt19937 rng(7);
    check_q_block_range<128, 128>(rng);
    check_q_block_range<64, 128>(rng);
    check_q_block_range<64, 64>(rng);
    std::printf(failures ? "%d FAILURES\n" : "all backward layout checks passed\n", failures);
    return failures ? 1 : 0;
}
