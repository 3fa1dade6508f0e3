// The check of the Hopper producers' tile copy (SwizzledTileCopy, producer_copies.cuh), shared by
// layout_check.cu (forward) and bwd_layout_check.cu (backward). Include after host_check.h.
#pragma once

#include "device/gmem_copies.cuh"
#include "device/producer_copies.cuh"

#include <cute/tensor.hpp>

#include <map>
#include <utility>

// A tile copy with a partial last pass (80 rows by 256 threads: the d256 backward's dK / dV store;
// loads refuse it): no reference tiled copy to compare with, so each chunk inside the tile must be
// at CuTe's address of its first element with its 8 elements contiguous, and the chunks must cover
// the tile once.
template <typename Element, typename SmemLayout, int kThreads, int kBlockCols>
void check_partial_pass_copy(const char* name, const char* what) {
    using namespace cute;
    using namespace flashattn::cuda::kernels;
    using Copy = SwizzledTileCopy<Element, SmemLayout, kThreads, kBlockCols>;
    const uintptr_t base = uintptr_t(3) << 20;
    Tensor tile = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(base)), SmemLayout{});
    std::map<std::pair<int, int>, int> cover;
    for (int tid = 0; tid < kThreads; ++tid) {
        const Copy copy(tid);
        for (int m = 0; m < Copy::kPasses; ++m)
            for (int k = 0; k < Copy::kColBlocks; ++k) {
                const int r = copy.row + m * Copy::kRowsPerPass, c = copy.col + k * Copy::kBlockCols;
                if (r >= Copy::kRows) continue;
                for (int e = 0; e < Copy::kChunkElems; ++e) {
                    const uintptr_t at = reinterpret_cast<uintptr_t>(raw_pointer_cast(&tile(r, c + e))) - base;
                    CHECK(at == copy.chunk_smem(m, k) + e * sizeof(Element),
                          "%s %s: thread %d chunk (%d, %d) element %d at byte %d, the copy reads %u", name, what, tid, m,
                          k, e, int(at), unsigned(copy.chunk_smem(m, k) + e * sizeof(Element)));
                    cover[{r, c + e}]++;
                }
            }
    }
    CHECK(int(cover.size()) == Copy::kRows * Copy::kCols, "%s %s: the copy covers %d of %d", name, what,
          int(cover.size()), Copy::kRows * Copy::kCols);
    for (auto& [rc, n] : cover) CHECK(n == 1, "%s %s: element (%d, %d) %d times", name, what, rc.first, rc.second, n);
}

// The Hopper producers' tile copy (SwizzledTileCopy) against CuTe's tiled copy of the same thread
// -> chunk map (GmemTileCopies, which the producer used before): thread tid's chunk (m, k) starts
// at the shared address CuTe gives it, in a tile placed as the kernel's (on a 1024-byte period),
// its 8 elements are contiguous there, and the chunks cover the tile once; byte_offset of every
// element is CuTe's.
template <typename Element, typename SmemLayout, int kThreads, int kBlockCols = 64>
void check_producer_copy(const char* name, const char* what) {
    using namespace cute;
    using namespace flashattn::cuda::kernels;
    using Copy = SwizzledTileCopy<Element, SmemLayout, kThreads, kBlockCols>;
    if constexpr (!Copy::kWholePasses) {
        check_partial_pass_copy<Element, SmemLayout, kThreads, kBlockCols>(name, what);
        return;
    }
    constexpr int kRows = Copy::kRows, kCols = Copy::kCols;
    using Reference = typename GmemTileCopies<Element, kBlockCols, kThreads>::Load;
    const uintptr_t base = uintptr_t(3) << 20;
    Tensor tile = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(base)), SmemLayout{});
    std::map<std::pair<int, int>, int> cover;
    for (int tid = 0; tid < kThreads; ++tid) {
        const Copy copy(tid);
        auto thr = Reference{}.get_thread_slice(tid);
        Tensor dst = thr.partition_D(tile);
        Tensor coords = thr.partition_S(make_identity_tensor(Shape<Int<kRows>, Int<kCols>>{}));
        CHECK(int(size<1>(dst)) == Copy::kPasses && int(size<2>(dst)) == Copy::kColBlocks,
              "%s %s: the reference copy has %d x %d chunks per thread", name, what, int(size<1>(dst)),
              int(size<2>(dst)));
        for (int m = 0; m < Copy::kPasses; ++m)
            for (int k = 0; k < Copy::kColBlocks; ++k) {
                const auto rc = coords(0, m, k);
                CHECK(get<0>(rc) == copy.row + m * Copy::kRowsPerPass && get<1>(rc) == copy.col + k * Copy::kBlockCols,
                      "%s %s: thread %d chunk (%d, %d) is element (%d, %d) in the reference", name, what, tid, m, k,
                      int(get<0>(rc)), int(get<1>(rc)));
                const uint32_t bytes = copy.chunk_smem(m, k);
                for (int e = 0; e < Copy::kChunkElems; ++e) {
                    const uintptr_t at = reinterpret_cast<uintptr_t>(raw_pointer_cast(&dst(e, m, k))) - base;
                    CHECK(at == bytes + e * sizeof(Element), "%s %s: thread %d chunk (%d, %d) element %d at byte %d, the copy writes %u",
                          name, what, tid, m, k, e, int(at), unsigned(bytes + e * sizeof(Element)));
                    cover[{int(get<0>(coords(e, m, k))), int(get<1>(coords(e, m, k)))}]++;
                }
            }
    }
    // byte_offset of every element (the Hopper backward's epilogue writes 4-byte pairs with it).
    for (int r = 0; r < kRows; ++r)
        for (int c = 0; c < kCols; ++c) {
            const uintptr_t at = reinterpret_cast<uintptr_t>(raw_pointer_cast(&tile(r, c))) - base;
            CHECK(at == Copy::byte_offset(r, c), "%s %s: element (%d, %d) at byte %d, byte_offset says %u", name, what,
                  r, c, int(at), unsigned(Copy::byte_offset(r, c)));
        }
    CHECK(int(cover.size()) == kRows * kCols, "%s %s: producer copy covers %d of %d", name, what, int(cover.size()),
          kRows * kCols);
    for (auto& [rc, n] : cover)
        CHECK(n == 1, "%s %s: producer copy element (%d, %d) %d times", name, what, rc.first, rc.second, n);
}


// TMA's writes of a tile against CuTe's layout: the tile loaded as boxes of kBoxCols columns by
// box_rows rows (column block c, rows [row0, row0 + box_rows) at shared element offset
// (c * kRows + row0) * kBoxCols, as the kernels place them), each box written row by row with the
// tensor map's swizzle (128-byte boxes: the 16-byte chunk bits 4-6 of the shared address XOR-ed
// with bits 7-9; 64-byte boxes: bits 4-5 with bits 7-8), lands every element where CuTe's layout
// says it is, and the boxes cover the tile once.
template <typename Element, typename SmemLayout, int kBoxCols>
void check_tma_boxes(const char* name, const char* what, int box_rows) {
    using namespace cute;
    constexpr int kRows = decltype(size<0>(SmemLayout{}))::value, kCols = decltype(size<1>(SmemLayout{}))::value;
    constexpr int kBoxBytes = kBoxCols * int(sizeof(Element));
    static_assert(kBoxBytes == 128 || kBoxBytes == 64, "the kernels' boxes span one swizzle row");
    const uintptr_t mask = kBoxBytes == 128 ? 7 : 3;
    const uintptr_t base = uintptr_t(3) << 20;
    Tensor tile = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(base)), SmemLayout{});
    std::map<std::pair<int, int>, int> cover;
    CHECK(kRows % box_rows == 0 && kCols % kBoxCols == 0, "%s %s: %d x %d boxes do not tile %d x %d", name, what,
          box_rows, kBoxCols, kRows, kCols);
    for (int c = 0; c < kCols / kBoxCols; ++c)
        for (int row0 = 0; row0 < kRows; row0 += box_rows) {
            const uintptr_t box = base + uintptr_t((c * kRows + row0) * kBoxCols) * sizeof(Element);
            for (int r = 0; r < box_rows; ++r)
                for (int col = 0; col < kBoxCols; ++col) {
                    const uintptr_t linear = box + uintptr_t(r * kBoxBytes + col * int(sizeof(Element)));
                    const uintptr_t written = linear ^ (((linear >> 7) & mask) << 4);
                    const uintptr_t expected = reinterpret_cast<uintptr_t>(raw_pointer_cast(&tile(row0 + r, c * kBoxCols + col)));
                    CHECK(written == expected, "%s %s: box (%d, rows %d+) element (%d, %d) lands at byte %d, CuTe has it at %d",
                          name, what, c, row0, r, col, int(written - base), int(expected - base));
                    cover[{row0 + r, c * kBoxCols + col}]++;
                }
        }
    CHECK(int(cover.size()) == kRows * kCols, "%s %s: TMA boxes cover %d of %d", name, what, int(cover.size()),
          kRows * kCols);
}
