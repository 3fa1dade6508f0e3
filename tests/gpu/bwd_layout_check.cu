// Host-side checks of the backward kernel's index math (no GPU needed; CuTe layouts are host
// functions too):
//
//   nvcc -std=c++17 --expt-relaxed-constexpr -I include -I src -I src/cuda \
//        -isystem third_party/cutlass/include tests/gpu/bwd_layout_check.cu -o /tmp/bwd_layout_check \
//     && /tmp/bwd_layout_check
//
// For every backward tiling:
//   - each of the three warp grids (S/dP, dK/dV, dQ) covers its accumulator tile exactly once, and
//     registers 2t, 2t+1 hold (row, col), (row, col + 1) with col even (the dQ red.add pairs, the
//     dK/dV float2 stores and the dropout column pairs rely on it);
//   - rows_cols() of the S accumulator is a matrix (one row per r, one column per c);
//   - the transposed shared-memory views address the same element as the plain ones, and each dQ
//     slab of K^T is the first slab's layout at a fixed offset;
//   - the global <-> shared copies cover each tile exactly once.
// And q_block_range() against brute force over random shapes and windows: every query block that
// meets a key block is visited, and every block run without the mask is fully allowed; and
// dq_key_blocks() (the key blocks that add to a query block's dQ) against q_block_range().
//
// For the Hopper kernel's traits (bwd_traits_sm90.cuh, bwd_kernel_sm90.cuh), with the 256 consumer
// threads: the S^T/dP^T, dK/dV and dQ accumulators cover their tiles exactly once in neighbouring
// column pairs; consumer warpgroup c holds keys [64c, 64c + 64) of S^T; the transposed (query, key)
// coordinates the policies see are S^T's swapped; the S^T registers read as the A operand of
// dV += P^T dO hold the (key, query) the RS wgmma expects there; the registers -> shared copy of dS^T
// writes each register to its own (key, query); the transposed shared-memory views; the producer's
// copies (128 threads) and the dK/dV epilogue's (256) address each chunk where CuTe's tiled copy
// does and cover each tile once (producer_copy_check.h). (What cannot be checked here: wgmma's
// descriptors, the mbarrier ring, which tests/gpu/bwd_sm90_protocol_check.py models.)
//
// For the P/dS Hopper schedule (Sm90BwdPdSTraits, bwd_kernel_sm90_pds.cuh; d256, and 192 with a
// value head dim of 128): S/dP, dK, dV and dQ cover their tiles once in neighbouring column pairs;
// consumer c holds keys [32c, 32c + 32) of S and dP and its half of the columns of dK, dQ (d / 2)
// and of dV (d_v / 2), and its wgmma operand slices are those (K and V rows for S/dP; Q^T, dO^T,
// K^T columns for dK/dV/dQ; P^T, dS^T, dS whole); each slice of a cut
// shared-memory operand is the first slice's layout at a fixed offset (cut at whole swizzle atoms,
// so one descriptor layout serves both consumers); the P/dS register -> shared copy writes each
// register to its own (query, key); the transposed views; the producer's copies and TMA boxes of
// Q and dO (32- and 64-column swizzle atoms at 192 / 128) and the dK/dV epilogue's copies; the dQ
// hand-off's chunk adds (where the traits have the hand-off) cover each chunk once.
#include "device/bwd_policies.cuh"
#include "kernels/backward/bwd_traits.cuh"
#include "kernels/backward_sm90/bwd_traits_sm90.cuh"
#include "device/tile_ops.cuh"
#include "device/wgmma_ops.cuh"

#include "host_check.h"
#include "key_mask_check.h"
#include "producer_copy_check.h"

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

// The ordered dQ's hand-off boxes (Sm90BwdDqBoxes): each consumer thread's per-register form of the address
// equals the swizzled box offset of the (row, column) the register holds; the block's elements land
// once each inside the buffer; and each warp's store of a register (transposed: one float; else a
// float2 pair) is as few shared-memory wavefronts as its bytes need (no bank conflicts).
template <typename Traits>
void check_dq_boxes(const char* name) {
    constexpr int M = Traits::kBlockM, D = Traits::kHeadDim, T = Traits::kConsumerThreads;
    using Boxes = Sm90BwdDqBoxes<Traits>;
    CHECK(M * D * 4 <= Traits::kSmemDqBytes && Traits::kDqBoxBytes == M * 128 && D % Traits::kDqBoxCols == 0,
          "%s: dQ hand-off boxes", name);
    // The default layout's rows: 16-byte aligned for the bulk reductions (bwd_sm90_common.cuh, add_dq).
    CHECK(Traits::kDqRowStride * 4 % 16 == 0 && Traits::kDqRowStride >= D && Traits::kSmemDqBytes == M * Traits::kDqRowStride * 4,
          "%s: dQ hand-off rows", name);
    typename Traits::TiledMmaDq mma_dq;
    using DqShape = std::conditional_t<Traits::kDqTransposed, Shape<Int<D>, Int<M>>, Shape<Int<M>, Int<D>>>;
    constexpr int kStep = Traits::kDqTransposed ? 1 : 2; // floats per store
    std::vector<int> hits(M * D, 0);
    std::vector<std::vector<uint32_t>> warp_addresses; // [warp * registers + t] -> its lanes' addresses
    int registers = 0;
    for (int tid = 0; tid < T; ++tid) {
        Tensor c = mma_dq.get_thread_slice(tid).partition_C(make_identity_tensor(DqShape{}));
        registers = int(size(c));
        auto row_of = [&](int t) { return Traits::kDqTransposed ? int(get<1>(c(t))) : int(get<0>(c(t))); };
        auto col_of = [&](int t) { return Traits::kDqTransposed ? int(get<0>(c(t))) : int(get<1>(c(t))); };
        const Boxes boxes(row_of(0), col_of(0));
        if (warp_addresses.empty()) warp_addresses.resize(size_t(T / 32) * registers);
        for (int t = 0; t < registers; t += kStep) {
            const int row = row_of(t), col = col_of(t);
            const uint32_t at = boxes.at(row - row_of(0), col - col_of(0));
            CHECK(at == Boxes::offset(row, col), "%s: thread %d, dQ register %d at (%d, %d): %u, its box offset %u",
                  name, tid, t, row, col, at, Boxes::offset(row, col));
            CHECK(at + 4 * kStep <= uint32_t(M * D * 4), "%s: dQ register %d outside the boxes", name, t);
            for (int e = 0; e < kStep; ++e) {
                CHECK(Boxes::offset(row, col + e) == at + 4 * e, "%s: a dQ pair is not contiguous", name);
                hits[(at + 4 * e) / 4] += 1;
            }
            warp_addresses[size_t(tid / 32) * registers + t].push_back(at);
        }
    }
    for (int h : hits) CHECK(h == 1, "%s: a dQ hand-off element written %d times", name, h);
    for (const std::vector<uint32_t>& lanes : warp_addresses) {
        if (lanes.empty()) continue;
        int words[32] = {};
        for (uint32_t at : lanes)
            for (int e = 0; e < kStep; ++e) words[(at / 4 + e) % 32] += 1;
        int wavefronts = 0;
        for (int w : words) wavefronts = std::max(wavefronts, w);
        CHECK(wavefronts == kStep, "%s: a warp's dQ store takes %d wavefronts, not %d", name, wavefronts, kStep);
    }
}

template <typename Traits>
void check_sm90_traits() {
    constexpr int M = Traits::kBlockM, N = Traits::kBlockN, D = Traits::kHeadDim, T = Traits::kConsumerThreads;
    char name[64];
    std::snprintf(name, sizeof(name), "sm90 d%d (%d keys x %d queries)", D, N, M);
    std::printf("checking %s, %d bytes of shared memory\n", name, Traits::kSmemBytes);
    CHECK(Traits::kSmemBytes <= 227 * 1024, "%s: %d bytes of shared memory", name, Traits::kSmemBytes);
    CHECK(Traits::kSmemTileBytes % 1024 == 0 && Traits::kSmemQElems * 2 % 1024 == 0 &&
              Traits::kSmemKVElems * 2 % 1024 == 0 && Traits::kSmemdSElems * 2 % 1024 == 0,
          "%s: a tile does not start on a 1024-byte swizzle period", name);
    check_grid<typename Traits::TiledMmaSdP, N, M>(name, T);
    check_grid<typename Traits::TiledMmaKV, N, D>(name, T);
    if constexpr (Traits::kDqTransposed) check_grid<typename Traits::TiledMmaDq, D, M>(name, T);
    else check_grid<typename Traits::TiledMmaDq, M, D>(name, T);
    check_transposed<typename Traits::SmemLayoutQ, typename Traits::SmemLayoutQt, M, D>(name);
    check_transposed<typename Traits::SmemLayoutKV, typename Traits::SmemLayoutKt, N, D>(name);
    check_transposed<typename Traits::SmemLayoutdS, typename Traits::SmemLayoutdSt, M, N>(name);
    using Element = typename Traits::Element;
    check_producer_copy<Element, typename Traits::SmemLayoutQ, Traits::kProducerThreads>(name, "Q/dO");
    // The ordered dQ's loaders alone (Sm90BwdProducerRoles, split), where the head dim has it.
    if constexpr (flashattn::cuda::tiles::backward_sm90_ordered_dq(D) && M == flashattn::cuda::tiles::backward_sm90_block_m(D))
        check_producer_copy<Element, typename Traits::SmemLayoutQ, Sm90BwdProducerRoles<Traits, true>::kLoaders>(
            name, "Q/dO, ordered dQ's loaders");
    // Q and dO by TMA (bwd_params_sm90.cuh): boxes of kQBoxCols columns by kBlockM rows.
    check_tma_boxes<Element, typename Traits::SmemLayoutQ, Traits::kQBoxCols>(name, "Q/dO by TMA", Traits::kBlockM);
    check_producer_copy<Element, typename Traits::SmemLayoutKV, Traits::kProducerThreads>(name, "K/V");
    check_producer_copy<Element, typename Traits::SmemLayoutKV, Traits::kConsumerThreads>(name, "dK/dV epilogue");
    check_dq_boxes<Traits>(name);

    typename Traits::TiledMmaSdP mma_sdp;
    typename Traits::TiledMmaKV mma_kv;
    auto copy_ds = make_tiled_copy_C(Copy_Atom<UniversalCopy<uint32_t>, typename Traits::Element>{}, mma_sdp);
    for (int tid = 0; tid < T; ++tid) {
        const int consumer = tid / 128;
        Tensor cS = mma_sdp.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<N>, Int<M>>{}));
        for (int t = 0; t < size(cS); ++t)
            CHECK(get<0>(cS(t)) / 64 == consumer, "%s: thread %d holds key %d of S^T", name, tid, get<0>(cS(t)));
        // The policies' (query, key) view.
        Tensor cQK = mma_sdp.get_thread_slice(tid).partition_C(transposed_identity_tensor<N, M>());
        Tensor qk = make_tensor(cQK.data(), transposed(wgmma_rows_cols(cQK.layout())));
        Tensor kq = make_tensor(cS.data(), wgmma_rows_cols(cS.layout()));
        for (int q = 0; q < size<0>(qk); ++q)
            for (int k = 0; k < size<1>(qk); ++k) {
                CHECK(get<0>(qk(q, k)) == get<1>(kq(k, q)) && get<1>(qk(q, k)) == get<0>(kq(k, q)),
                      "%s: thread %d, (query, key) view (%d, %d) is (%d, %d), S^T holds (%d, %d)", name, tid, q, k,
                      get<0>(qk(q, k)), get<1>(qk(q, k)), get<0>(kq(k, q)), get<1>(kq(k, q)));
                CHECK(get<0>(qk(q, k)) == get<0>(qk(q, 0)), "%s: query varies along a row of the view", name);
            }
        // P^T from the S^T registers as the A operand of dV += P^T dO: (key, query) per register.
        Tensor a_expected = mma_kv.get_thread_slice(tid).partition_A(make_identity_tensor(Shape<Int<N>, Int<M>>{}));
        Tensor a_held = make_tensor(cS.data(), wgmma_accumulator_as_a_operand(cS.layout()));
        CHECK(size(a_expected) == size(a_held), "%s: A fragment %d registers, accumulator %d", name,
              int(size(a_expected)), int(size(a_held)));
        for (int t = 0; t < size(a_held) && t < size(a_expected); ++t)
            CHECK(a_expected(t) == a_held(t), "%s: thread %d, A register %d: wgmma expects (%d, %d), holds (%d, %d)",
                  name, tid, t, get<0>(a_expected(t)), get<1>(a_expected(t)), get<0>(a_held(t)), get<1>(a_held(t)));
        // dS^T registers -> shared: register t lands on the (key, query) it holds.
        auto thr_copy = copy_ds.get_thread_slice(tid);
        Tensor from = thr_copy.retile_S(cS);
        Tensor to = thr_copy.partition_D(make_identity_tensor(Shape<Int<N>, Int<M>>{}));
        CHECK(size(from) == size(to), "%s: dS copy sizes %d vs %d", name, int(size(from)), int(size(to)));
        for (int t = 0; t < size(from) && t < size(to); ++t)
            CHECK(from(t) == to(t), "%s: thread %d, dS register %d holds (%d, %d), is stored at (%d, %d)", name, tid,
                  t, get<0>(from(t)), get<1>(from(t)), get<0>(to(t)), get<1>(to(t)));
    }
}

// The consumer warpgroup c's slice of a wgmma operand (partition_A / partition_B of a GMMA thread
// slice is the whole warpgroup's part): every coordinate it reads must lie in [lo, hi) along mode
// `dim`, and it must read all of them.
template <int kDim, typename Part>
void check_slice(const char* name, const char* what, int consumer, Part const& part, int lo, int hi, int other) {
    std::map<std::pair<int, int>, int> seen;
    for (int t = 0; t < size(part); ++t) {
        const int x = get<kDim>(part(t));
        CHECK(x >= lo && x < hi, "%s: consumer %d reads %s coordinate %d outside [%d, %d)", name, consumer, what, x, lo,
              hi);
        seen[{get<0>(part(t)), get<1>(part(t))}]++;
    }
    CHECK(int(seen.size()) == (hi - lo) * other, "%s: consumer %d reads %d elements of %s, expected %d", name,
          consumer, int(seen.size()), what, (hi - lo) * other);
}

// Slice c of a layout cut along mode kDim into kSlices parts is slice 0 at a fixed offset (the cut
// falls on whole swizzle atoms): the consumers' descriptors differ only in their start address.
// Offsets are taken through a tile on a 1024-byte period (the GMMA layouts swizzle shared-memory
// addresses, not element offsets).
template <int kDim, int kSlices, typename Layout, int kRows, int kCols>
void check_atom_cut(const char* name, const char* what) {
    const uintptr_t base = uintptr_t(3) << 20;
    Tensor tile = make_tensor(make_smem_ptr(reinterpret_cast<cutlass::half_t*>(base)), Layout{});
    auto at = [&](int r, int c) { return int(reinterpret_cast<uintptr_t>(raw_pointer_cast(&tile(r, c))) - base) / 2; };
    constexpr int kExtent = kDim == 0 ? kRows : kCols;
    constexpr int kPer = kExtent / kSlices;
    for (int c = 1; c < kSlices; ++c) {
        const int offset = kDim == 0 ? at(c * kPer, 0) - at(0, 0) : at(0, c * kPer) - at(0, 0);
        for (int i = 0; i < (kDim == 0 ? kPer : kRows); ++i)
            for (int j = 0; j < (kDim == 0 ? kCols : kPer); ++j) {
                const int here = kDim == 0 ? at(c * kPer + i, j) : at(i, c * kPer + j);
                CHECK(here == at(i, j) + offset, "%s: %s slice %d (%d, %d) -> %d, slice 0 + %d -> %d", name, what, c, i,
                      j, here, offset, at(i, j) + offset);
            }
        // A whole number of 1024-byte swizzle periods (16-bit elements), so the swizzle phase matches.
        CHECK(offset * 2 % 1024 == 0, "%s: %s slice %d starts %d bytes in, not on a swizzle period", name, what, c,
              offset * 2);
    }
}

// The P / dS stores of a schedule whose consumers' keys are no whole 16-key atoms (d256's 40:
// bwd_kernel_sm90_pds.cuh's store_pds, one stmatrix x2 per 8-key group j): lane L of warp w gives
// the address of row 16w + L % 8 + 8 ((L / 8) % 2) at key 40c + 8j; matrix i's row r comes from lane
// 8i + r and takes from lane l register pair i + 2j at bytes 4 (l % 4). Each pair must land where the
// buffer's layout puts the (query, key) it holds, and the stores must cover the buffer once.
template <typename Traits>
void check_pds_stmatrix(const char* name) {
    using Element = typename Traits::Element;
    constexpr int M = Traits::kBlockM, N = Traits::kBlockN, kKeys = Traits::kKeysPerWarpGroup;
    const uintptr_t base = uintptr_t(3) << 20;
    Tensor buffer = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(base)), typename Traits::SmemLayoutPdS{});
    auto offset_of = [&](int q, int k) { return int(reinterpret_cast<uintptr_t>(raw_pointer_cast(&buffer(q, k))) - base); };
    typename Traits::TiledMmaSdP mma_sdp;
    std::map<int, int> cover;
    for (int tid = 0; tid < Traits::kConsumerThreads; ++tid) {
        const int consumer = tid / 128, warp = (tid % 128) / 32, l = tid % 32;
        Tensor cS = mma_sdp.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
        CHECK(size(cS) == 4 * (kKeys / 8), "%s: %d S registers a thread", name, int(size(cS)));
        auto lane_row = [&](int lane) { return 16 * warp + lane % 8 + 8 * ((lane / 8) % 2); };
        for (int j = 0; j < kKeys / 8; ++j)
            for (int i = 0; i < 2; ++i) {
                const int at = offset_of(lane_row(8 * i + l / 4), kKeys * consumer + 8 * j) + 4 * (l % 4);
                for (int e = 0; e < 2; ++e) {
                    const auto qk = cS(2 * (i + 2 * j) + e);
                    CHECK(offset_of(get<0>(qk), get<1>(qk)) == at + 2 * e,
                          "%s: thread %d pair %d element %d holds (%d, %d) at byte %d, stmatrix stores it at %d", name,
                          tid, i + 2 * j, e, get<0>(qk), get<1>(qk), offset_of(get<0>(qk), get<1>(qk)), at + 2 * e);
                    cover[at + 2 * e]++;
                }
            }
    }
    CHECK(int(cover.size()) == M * N, "%s: the P / dS stores cover %d of %d elements", name, int(cover.size()), M * N);
}

// Staged dQ (the traits' staged_dq_box, bwd_kernel_sm90_pds.cuh's store_staged_dq): consumer c's
// boxes 0, 1 in the region and the P buffer, 2, 3 over the Q stage's 64-column blocks that its dK^T
// alone reads; each register of a dQ product at the byte of its (row, column) in the box's 128-byte
// swizzle (the dQ map's, Sm90BwdDqBoxes), by the kernel's per-thread formula.
template <typename Traits>
void check_staged_dq(const char* name) {
    constexpr int kBoxBytes = Traits::kDqBoxBytes;
    // Byte ranges: the region at 0, P at kPAt, Q stage column block t at kQAt + t * kBoxBytes (of one stage).
    constexpr int kPAt = 1 << 20, kQAt = 2 << 20;
    auto box_at = [&](int c, int b) {
        const auto place = Traits::staged_dq_box(c, b);
        return (place.in == Traits::kDqInQStage ? kQAt : place.in == Traits::kDqInP ? kPAt : 0) + place.bytes;
    };
    std::map<int, int> boxes;
    typename Traits::TiledMmaDk mma_dk;
    for (int c = 0; c < Traits::kConsumerWarpGroups; ++c)
        for (int b = 0; b < Traits::kDqBoxes; ++b) {
            const int at = box_at(c, b);
            boxes[at]++;
            CHECK(at % 1024 == 0, "%s: consumer %d box %d not on a swizzle period", name, c, b);
            if (at < kPAt) CHECK(at + kBoxBytes <= Traits::kSmemDqBytes, "%s: consumer %d box %d past the region", name, c, b);
            else if (at == kPAt) CHECK(kBoxBytes <= Traits::kSmemPdSElems * 2, "%s: the P box past the buffer", name);
            else {
                // Q columns [64 t, 64 t + 64) of this box: Q^T rows that only consumer c's dK^T reads.
                const int t = (at - kQAt) / kBoxBytes;
                CHECK(Traits::kAtomColsQK * 2 * Traits::kBlockM == kBoxBytes, "%s: a Q column block is a box", name);
                for (int tid = 0; tid < Traits::kConsumerThreads; ++tid) {
                    Tensor a = mma_dk.get_thread_slice(tid - tid % 128)
                                   .partition_A(make_identity_tensor(Shape<Int<Traits::kHeadDim>, Int<Traits::kBlockM>>{}));
                    for (int e = 0; e < size(a); ++e)
                        if (get<0>(a(e)) / Traits::kAtomColsQK == t)
                            CHECK(tid / 128 == c, "%s: consumer %d's dK^T reads Q column block %d, consumer %d's box %d", name,
                                  tid / 128, t, c, b);
                }
            }
        }
    CHECK(int(boxes.size()) == Traits::kConsumerWarpGroups * Traits::kDqBoxes, "%s: two boxes share bytes", name);
    typename Traits::TiledMmaDq mma_dq;
    for (int tid = 0; tid < 128; ++tid) {
        Tensor c = mma_dq.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<Traits::kBlockM>, Int<Traits::kDqCols>>{}));
        const int row0 = get<0>(c(0)), col0 = get<1>(c(0));
        const int chunk_xor = (col0 / 4) ^ (row0 % 8);
        for (int j = 0; j < Traits::kDqCols / 8; ++j)
            for (int h = 0; h < 2; ++h)
                for (int e = 0; e < 2; ++e) {
                    const int row = get<0>(c(4 * j + 2 * h + e)), col = get<1>(c(4 * j + 2 * h + e));
                    const int kernel = (j / 4) * kBoxBytes + row0 * 128 + (col0 % 4) * 4 + ((2 * (j % 4)) ^ chunk_xor) * 16 +
                                       h * 8 * 128 + 4 * e;
                    const int box = (col / 32) * kBoxBytes + row * 128 + ((((col % 32) / 4) ^ (row % 8)) * 16) + (col % 4) * 4;
                    CHECK(kernel == box, "%s: dQ thread %d register %d (%d, %d) at byte %d, the box has it at %d", name, tid,
                          4 * j + 2 * h + e, row, col, kernel, box);
                }
    }
}

template <typename Traits>
void check_sm90_pds_traits() {
    using Element = typename Traits::Element;
    constexpr int M = Traits::kBlockM, N = Traits::kBlockN, D = Traits::kHeadDim, DV = Traits::kHeadDimV;
    constexpr int T = Traits::kConsumerThreads;
    constexpr int kKeys = Traits::kKeysPerWarpGroup, kCols = Traits::kColsPerWarpGroup;
    constexpr bool kByHeadDim = Traits::kDkvByHeadDim; // dK^T / dV^T rows split, else keys
    constexpr bool kStaged = Traits::kDqStaged;        // dQ in halves, one warpgroup's product each
    constexpr int kDqCols = Traits::kDqCols;
    char name[96];
    std::snprintf(name, sizeof(name), "sm90 P/dS schedule d%d/%d (%d queries x %d keys, %d-bit)", D, DV, M, N,
                  int(sizeof(Element) * 8));
    std::printf("checking %s, %d bytes of shared memory, dQ %s\n", name, Traits::kSmemBytes,
                Traits::kDqHandoff ? "handed off" : "staged");
    CHECK(Traits::kSmemBytes <= 227 * 1024, "%s: %d bytes of shared memory", name, Traits::kSmemBytes);
    CHECK(Traits::kSmemTileBytes % 1024 == 0 && Traits::kSmemQElems * 2 % 1024 == 0 &&
              Traits::kSmemDoElems * 2 % 1024 == 0 && Traits::kSmemKElems * 2 % 1024 == 0 &&
              Traits::kSmemVElems * 2 % 1024 == 0 && Traits::kSmemPdSElems * 2 % 1024 == 0,
          "%s: a tile does not start on a 1024-byte swizzle period", name);
    static_assert(Traits::kDkvTransposed, "dK^T, dV^T: (head dim, keys)");
    check_grid<typename Traits::TiledMmaSdP, M, N>(name, T);
    check_grid<typename Traits::TiledMmaDk, D, N>(name, T);
    check_grid<typename Traits::TiledMmaDv, DV, N>(name, T);
    if constexpr (kStaged) check_grid<typename Traits::TiledMmaDq, M, kDqCols>(name, 128);
    else check_grid<typename Traits::TiledMmaDq, M, D>(name, T);
    check_transposed<typename Traits::SmemLayoutQ, typename Traits::SmemLayoutQt, M, D>(name);
    check_transposed<typename Traits::SmemLayoutDo, typename Traits::SmemLayoutDot, M, DV>(name);
    check_transposed<typename Traits::SmemLayoutK, typename Traits::SmemLayoutKt, N, D>(name);
    check_transposed<typename Traits::SmemLayoutPdS, typename Traits::SmemLayoutPdSt, M, N>(name);
    check_producer_copy<Element, typename Traits::SmemLayoutQ, Traits::kProducerThreads>(name, "Q");
    check_producer_copy<Element, typename Traits::SmemLayoutDo, Traits::kProducerThreads>(name, "dO");
    check_producer_copy<Element, typename Traits::SmemLayoutQ, Sm90BwdProducerRoles<Traits, true>::kLoaders>(
        name, "Q, ordered dQ's loaders");
    check_producer_copy<Element, typename Traits::SmemLayoutDo, Sm90BwdProducerRoles<Traits, true>::kLoaders>(
        name, "dO, ordered dQ's loaders");
    // Q and dO by TMA (bwd_params_sm90.cuh): boxes of one atom's columns by kBlockM rows.
    check_tma_boxes<Element, typename Traits::SmemLayoutQ, Traits::kQBoxCols>(name, "Q by TMA", Traits::kBlockM);
    check_tma_boxes<Element, typename Traits::SmemLayoutDo, Traits::kDoBoxCols>(name, "dO by TMA", Traits::kBlockM);
    check_producer_copy<Element, typename Traits::SmemLayoutK, Traits::kProducerThreads>(name, "K");
    check_producer_copy<Element, typename Traits::SmemLayoutV, Traits::kProducerThreads>(name, "V");
    check_producer_copy<Element, typename Traits::SmemLayoutK, Traits::kConsumerThreads>(name, "dK epilogue");
    check_producer_copy<Element, typename Traits::SmemLayoutV, Traits::kConsumerThreads>(name, "dV epilogue");
    // Cut operands: K / V rows (S, dP) by keys; K^T (dQ) by head-dim columns; Q^T, dO^T (dK^T, dV^T)
    // in 64-row blocks where split by head dim, else P / dS (their B) by keys.
    check_atom_cut<0, Traits::kConsumerWarpGroups, typename Traits::SmemLayoutK, N, D>(name, "K rows");
    check_atom_cut<0, Traits::kConsumerWarpGroups, typename Traits::SmemLayoutV, N, DV>(name, "V rows");
    check_atom_cut<0, D / kDqCols, typename Traits::SmemLayoutKt, D, N>(name, "K^T columns");
    if constexpr (kByHeadDim) {
        check_atom_cut<0, D / 64, typename Traits::SmemLayoutQt, D, M>(name, "Q^T 64-row blocks");
        check_atom_cut<0, DV / 64, typename Traits::SmemLayoutDot, DV, M>(name, "dO^T 64-row blocks");
    } else {
        check_atom_cut<0, Traits::kConsumerWarpGroups, typename Traits::SmemLayoutPdSt, N, M>(name, "P / dS keys");
    }
    if constexpr (Traits::kDqHandoff) check_dq_boxes<Traits>(name);

    typename Traits::TiledMmaSdP mma_sdp;
    typename Traits::TiledMmaDk mma_dk;
    typename Traits::TiledMmaDv mma_dv;
    typename Traits::TiledMmaDq mma_dq;
    auto copy_pds = make_tiled_copy_C(Copy_Atom<UniversalCopy<uint32_t>, Element>{}, mma_sdp);
    // The rows of dK^T / dV^T consumer c holds: 64-row blocks alternating (by head dim), or all.
    auto holds_row = [&](int consumer, int row) { return !kByHeadDim || (row / 64) % Traits::kConsumerWarpGroups == consumer; };
    auto holds_key = [&](int consumer, int key) { return kByHeadDim || key / kKeys == consumer; };
    for (int tid = 0; tid < T; ++tid) {
        const int consumer = tid / 128;
        auto sdp = mma_sdp.get_thread_slice(tid);
        auto dk = mma_dk.get_thread_slice(tid);
        auto dv = mma_dv.get_thread_slice(tid);
        // Accumulator slices.
        Tensor cS = sdp.partition_C(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
        for (int t = 0; t < size(cS); ++t)
            CHECK(get<1>(cS(t)) / kKeys == consumer, "%s: thread %d holds key %d of S", name, tid, get<1>(cS(t)));
        Tensor cK = dk.partition_C(make_identity_tensor(Shape<Int<D>, Int<N>>{}));
        for (int t = 0; t < size(cK); ++t)
            CHECK(holds_row(consumer, get<0>(cK(t))) && holds_key(consumer, get<1>(cK(t))),
                  "%s: thread %d holds (%d, %d) of dK^T", name, tid, get<0>(cK(t)), get<1>(cK(t)));
        Tensor cV = dv.partition_C(make_identity_tensor(Shape<Int<DV>, Int<N>>{}));
        for (int t = 0; t < size(cV); ++t)
            CHECK(holds_row(consumer, get<0>(cV(t))) && holds_key(consumer, get<1>(cV(t))),
                  "%s: thread %d holds (%d, %d) of dV^T", name, tid, get<0>(cV(t)), get<1>(cV(t)));
        CHECK(size(cK) == D * N / T && size(cV) == DV * N / T, "%s: dK^T / dV^T registers", name);
        if constexpr (!kStaged) {
            Tensor cQ = mma_dq.get_thread_slice(tid).partition_C(make_identity_tensor(Shape<Int<M>, Int<D>>{}));
            for (int t = 0; t < size(cQ); ++t)
                CHECK(get<1>(cQ(t)) / kCols == consumer, "%s: thread %d holds column %d of dQ", name, tid, get<1>(cQ(t)));
        }
        // The policies' (query, key) view: one query per row, one key per column.
        Tensor qk = make_tensor(cS.data(), wgmma_rows_cols(cS.layout()));
        for (int r = 0; r < size<0>(qk); ++r)
            for (int c = 0; c < size<1>(qk); ++c) {
                CHECK(get<0>(qk(r, c)) == get<0>(qk(r, 0)), "%s: query varies along a row of the view", name);
                CHECK(get<1>(qk(r, c)) == get<1>(qk(0, c)), "%s: key varies along a column of the view", name);
            }
        // P / dS registers -> shared: register t lands on the (query, key) it holds.
        auto thr_copy = copy_pds.get_thread_slice(tid);
        Tensor from = thr_copy.retile_S(cS);
        Tensor to = thr_copy.partition_D(make_identity_tensor(Shape<Int<M>, Int<N>>{}));
        CHECK(size(from) == size(to), "%s: P/dS copy sizes %d vs %d", name, int(size(from)), int(size(to)));
        for (int t = 0; t < size(from) && t < size(to); ++t)
            CHECK(from(t) == to(t), "%s: thread %d, P/dS register %d holds (%d, %d), is stored at (%d, %d)", name, tid,
                  t, get<0>(from(t)), get<1>(from(t)), get<0>(to(t)), get<1>(to(t)));
        // Operand slices each consumer's wgmmas read (once per warpgroup: its first thread).
        if (tid % 128 != 0) continue;
        const int k_lo = consumer * kKeys, c_lo = consumer * kCols;
        check_slice<0>(name, "Q rows of S (all)", consumer, sdp.partition_A(make_identity_tensor(Shape<Int<M>, Int<D>>{})),
                       0, M, D);
        check_slice<0>(name, "K rows of S", consumer, sdp.partition_B(make_identity_tensor(Shape<Int<N>, Int<D>>{})),
                       k_lo, k_lo + kKeys, D);
        check_slice<0>(name, "dO rows of dP (all)", consumer,
                       sdp.partition_A(make_identity_tensor(Shape<Int<M>, Int<DV>>{})), 0, M, DV);
        check_slice<0>(name, "V rows of dP", consumer, sdp.partition_B(make_identity_tensor(Shape<Int<N>, Int<DV>>{})),
                       k_lo, k_lo + kKeys, DV);
        if constexpr (kByHeadDim) { // its 64-row blocks of Q^T / dO^T, all keys of P / dS
            auto rows_of = [&](const char* what, auto const& part, int rows) {
                std::map<std::pair<int, int>, int> seen;
                for (int t = 0; t < size(part); ++t) {
                    CHECK(holds_row(consumer, get<0>(part(t))), "%s: consumer %d reads row %d of %s", name, consumer,
                          get<0>(part(t)), what);
                    seen[{get<0>(part(t)), get<1>(part(t))}]++;
                }
                CHECK(int(seen.size()) == rows / Traits::kConsumerWarpGroups * M, "%s: consumer %d reads %d of %s",
                      name, consumer, int(seen.size()), what);
            };
            rows_of("Q^T of dK^T", dk.partition_A(make_identity_tensor(Shape<Int<D>, Int<M>>{})), D);
            rows_of("dO^T of dV^T", dv.partition_A(make_identity_tensor(Shape<Int<DV>, Int<M>>{})), DV);
            check_slice<0>(name, "dS keys of dK^T (all)", consumer,
                           dk.partition_B(make_identity_tensor(Shape<Int<N>, Int<M>>{})), 0, N, M);
            check_slice<0>(name, "P keys of dV^T (all)", consumer,
                           dv.partition_B(make_identity_tensor(Shape<Int<N>, Int<M>>{})), 0, N, M);
        } else {
            check_slice<0>(name, "Q^T of dK^T (all)", consumer,
                           dk.partition_A(make_identity_tensor(Shape<Int<D>, Int<M>>{})), 0, D, M);
            check_slice<0>(name, "dS keys of dK^T", consumer,
                           dk.partition_B(make_identity_tensor(Shape<Int<N>, Int<M>>{})), k_lo, k_lo + kKeys, M);
            check_slice<0>(name, "dO^T of dV^T (all)", consumer,
                           dv.partition_A(make_identity_tensor(Shape<Int<DV>, Int<M>>{})), 0, DV, M);
            check_slice<0>(name, "P keys of dV^T", consumer,
                           dv.partition_B(make_identity_tensor(Shape<Int<N>, Int<M>>{})), k_lo, k_lo + kKeys, M);
        }
        if constexpr (kStaged) { // each product: the consumer's column block 2c + half of K^T (the kernel's local_tile)
            auto ops = mma_dq.get_thread_slice(0);
            check_slice<0>(name, "dS of dQ (all)", consumer, ops.partition_A(make_identity_tensor(Shape<Int<M>, Int<N>>{})),
                           0, M, N);
            for (int half = 0; half < Traits::kDqHalves; ++half) {
                Tensor kt = local_tile(make_identity_tensor(Shape<Int<D>, Int<N>>{}), Shape<Int<kDqCols>, Int<N>>{},
                                       make_coord(Traits::kDqHalves * consumer + half, 0));
                const int lo = c_lo + half * kDqCols;
                check_slice<0>(name, "K^T columns of a dQ half", consumer, ops.partition_B(kt), lo, lo + kDqCols, N);
            }
        } else {
            auto dq = mma_dq.get_thread_slice(tid);
            check_slice<0>(name, "dS of dQ (all)", consumer, dq.partition_A(make_identity_tensor(Shape<Int<M>, Int<N>>{})),
                           0, M, N);
            check_slice<0>(name, "K^T columns of dQ", consumer,
                           dq.partition_B(make_identity_tensor(Shape<Int<D>, Int<N>>{})), c_lo, c_lo + kCols, N);
        }
    }
    if constexpr (kKeys % 16 != 0) check_pds_stmatrix<Traits>(name);
    if constexpr (kStaged) check_staged_dq<Traits>(name);
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

// dq_key_blocks(m) is exactly {n : m in q_block_range(n)} (the ordered dQ of deterministic mode
// counts on it: a key block counted that never adds hangs the kernel, one not counted misorders it),
// over random shapes and windows and every query block, including ragged ends, rows that see no key
// (causal with more queries than keys, windows), and empty sides.
template <int kBlockM, int kBlockN>
void check_dq_key_blocks(std::mt19937& rng) {
    std::uniform_int_distribution<int> len(0, 700), window(-1, 300), coin(0, 3);
    for (int trial = 0; trial < 4000; ++trial) {
        SequenceBounds s{len(rng), len(rng), 0, 0};
        if (coin(rng) == 0) s.q_len = s.k_len;
        if (coin(rng) == 0) s.q_len = len(rng) / 30; // a few query rows, or none
        MaskSpec mask{window(rng), window(rng)};
        if (coin(rng) == 0) mask = MaskSpec{-1, 0};  // causal
        if (coin(rng) == 0) mask = MaskSpec{-1, -1}; // none
        if (coin(rng) == 0) mask.window_left = 0;    // the narrowest windows
        const int key_blocks = (s.k_len + kBlockN - 1) / kBlockN;
        for (int m = 0; m * kBlockM < s.q_len + kBlockM; ++m) { // and one block past the rows
            const KeyBlockRange r = dq_key_blocks<kBlockM, kBlockN>(mask, s, m);
            CHECK(r.n_begin <= r.n_end, "dq_key_blocks: q_len %d k_len %d block %d: range [%d, %d)", s.q_len, s.k_len,
                  m, r.n_begin, r.n_end);
            for (int n = 0; n < key_blocks + 1; ++n) {
                const QBlockRange q = q_block_range<kBlockM, kBlockN>(mask, s, n * kBlockN);
                const bool adds = m >= q.m_begin && m < q.m_end;
                const bool counted = n >= r.n_begin && n < r.n_end;
                CHECK(adds == counted,
                      "dq_key_blocks: q_len %d k_len %d window (%lld, %lld) query block %d key block %d: adds %d, "
                      "counted %d (range [%d, %d))",
                      s.q_len, s.k_len, (long long)mask.window_left, (long long)mask.window_right, m, n, adds, counted,
                      r.n_begin, r.n_end);
            }
        }
    }
}

template <int kHeadDim>
void check_tiling() {
    check_traits<DefaultBwdTraits<kHeadDim, cutlass::bfloat16_t>>();
}

template <typename Traits>
void check_sm90_key_mask(const char* name, std::mt19937& rng) {
    constexpr int M = Traits::kBlockM, N = Traits::kBlockN;
    typename Traits::TiledMmaSdP mma_sdp;
    auto view = [&](int tid) {
        Tensor cQK = mma_sdp.get_thread_slice(tid).partition_C(transposed_identity_tensor<N, M>());
        return make_tensor(cQK.data(), transposed(wgmma_rows_cols(cQK.layout())));
    };
    using View = decltype(view(0));
    static_assert(decltype(size<0>(View{}))::value > decltype(size<1>(View{}))::value,
                  "the Hopper backward's (query, key) views are tall: apply_key_mask takes ranges per key");
    check_key_mask<View>(name, Traits::kConsumerThreads, M, N, view, rng, decltype(size<0>(View{}))::value <= 32 ? 0 : -1);
}

int main() {
    check_tiling<32>();
    check_tiling<64>();
    check_tiling<96>();
    check_tiling<128>();
    check_tiling<192>();
    check_tiling<256>();
    check_sm90_traits<Sm90BwdTraits<64, cutlass::bfloat16_t>>();
    check_sm90_traits<Sm90BwdTraits<128, cutlass::bfloat16_t>>();
    check_sm90_traits<Sm90BwdTraits<128, cutlass::half_t>>();
    check_sm90_traits<Sm90BwdTraits<128, cutlass::bfloat16_t, 64>>(); // the ordered dQ's
    check_sm90_pds_traits<Sm90BwdPdSTraits<256, cutlass::bfloat16_t>>();
    check_sm90_pds_traits<Sm90BwdPdSTraits<256, cutlass::half_t>>();
    check_sm90_pds_traits<Sm90BwdPdSTraits<192, cutlass::bfloat16_t, 128>>();
    check_sm90_pds_traits<Sm90BwdPdSTraits<192, cutlass::half_t, 128>>();
    std::mt19937 rng(7);
    check_q_block_range<128, 128>(rng);
    check_q_block_range<64, 128>(rng);
    check_q_block_range<80, 128>(rng);
    check_q_block_range<64, 64>(rng);
    check_q_block_range<64, 96>(rng);
    check_q_block_range<64, 80>(rng);
    check_dq_key_blocks<64, 128>(rng); // the Hopper backward's blocks at d128
    check_dq_key_blocks<64, 80>(rng);  // and at d256
    check_dq_key_blocks<64, 96>(rng);  // and at 192 / 128
    check_sm90_key_mask<Sm90BwdTraits<64, cutlass::bfloat16_t>>("sm90 bwd d64 key mask", rng);
    check_sm90_key_mask<Sm90BwdTraits<128, cutlass::bfloat16_t>>("sm90 bwd d128 key mask", rng);
    check_sm90_key_mask<Sm90BwdTraits<128, cutlass::bfloat16_t, 64>>("sm90 bwd d128 (64 queries) key mask", rng);
    std::printf(failures ? "%d FAILURES\n" : "all backward layout checks passed\n", failures);
    return failures ? 1 : 0;
}
