// Global -> shared copies of a producer warpgroup (the warp-specialised Hopper kernels): every
// 16-byte chunk goes through cp.async, zero-filled (source size 0) where rows or columns lie outside
// the tensor, so that one cp.async.mbarrier.arrive per producer thread covers every byte of a stage.
// (load_tile in tile_ops.cuh zero-fills with plain shared stores, which an mbarrier does not track.)
#pragma once

#include <cute/tensor.hpp>

namespace flashattn::cuda::kernels {

using namespace cute;

// 16 bytes global -> shared, or 16 zero bytes when !valid (source size 0: nothing is read, but the
// address must still be a valid one, so the caller passes a safe pointer then).
__device__ __forceinline__ void cp_async_16_or_zero(uint32_t smem, const void* gmem, bool valid) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem),
                 "r"(valid ? 16 : 0));
}

// 16 bytes global -> shared, unpredicated (a chunk known to lie inside the tensor): the decode
// kernel's whole-block copies. The L2 prefetch size is 128 bytes, as in cp_async_16_or_zero: 256
// read the decode caches 7-9% slower at batch >= 16 on the H200, 64 and no hint at all the same as
// 128 (docs/perf-log.md).
__device__ __forceinline__ void cp_async_16(uint32_t smem, const void* gmem) {
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(smem), "l"(gmem));
}

// One thread's 16-byte chunks of a (kRows x kCols) tile whose shared layout is SmemLayout (K-major,
// swizzled in kBlockCols-wide atoms): the same thread -> chunk map as GmemTileCopies<Element,
// kBlockCols, kThreads> (kBlockCols / 8 threads per row, kRowsPerPass rows per pass), with the
// addresses kept as a base or two plus compile-time offsets. load_async: global -> shared by
// cp.async (the Hopper kernels' producers, the split-keys decode kernel's warps); store: shared ->
// global, 16 bytes a thread (the Hopper backward's dK/dV epilogue).
// Why not a CuTe tiled copy of the partitioned tensors (as load_tile): they give every chunk its own
// swizzled shared address and global pointer, the compiler hoists all of them out of the producer's
// loops, and a producer lowered to 24 registers (d128, d256 backward) then spills them: every
// cp.async waited for a local-memory load queued behind the cp.asyncs before it, and issuing one
// key block's K and V took ~12 us (the timeline build, d128), a third of a CTA at 1k tokens. In the
// decode kernel the same copy cost ~15 instructions a chunk (a zero-fill of 4 shared stores, the
// pointer reloaded from the constant bank, 64-bit address arithmetic): a third of its instructions.
// Here the shared offset of chunk (pass m, column block k) is base + offset(m * kRowsPerPass,
// k * kBlockCols): the swizzle XORs a row's bits within a period of 8 rows into its 16-byte chunk
// index; when kRowsPerPass is a multiple of 8 and column blocks are whole swizzle atoms, neither
// moves the XOR. A warp (32 threads, 8 per 64-column row) has 4 rows per pass: then passes m and
// m + 2 differ by 8 rows, so the thread keeps one base per pass parity (kBases) and the offsets
// stay constants (layout_check and bwd_layout_check compare every thread's chunks with CuTe's
// tiled copy).
// Bytes from a shared tile's start to element (r, c) of SmemLayout. The GMMA layouts swizzle
// shared-memory addresses, not the layout's element offsets (CuTe's smem_ptr_flag), so the offset is
// taken through a tensor at an address on a 1024-byte swizzle period, as every tile's own.
template <typename Element, typename SmemLayout>
__host__ __device__ __forceinline__ uint32_t smem_byte_offset(int r, int c) {
    constexpr uintptr_t kBase = uintptr_t(1) << 20;
    Tensor t = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(kBase)), SmemLayout{});
    return uint32_t(reinterpret_cast<uintptr_t>(raw_pointer_cast(&t(r, c))) - kBase);
}

template <typename Element, typename SmemLayout, int kThreads, int kBlockCols_ = 64>
struct SwizzledTileCopy {
    static constexpr int kChunkElems = 16 / int(sizeof(Element));
    static constexpr int kBlockCols = kBlockCols_;
    static constexpr int kThreadsPerRow = kBlockCols / kChunkElems;
    static constexpr int kRowsPerPass = kThreads / kThreadsPerRow;
    static constexpr int kRows = decltype(size<0>(SmemLayout{}))::value;
    static constexpr int kCols = decltype(size<1>(SmemLayout{}))::value;
    // A tile whose rows are no whole number of passes (80 keys by 256 threads) has a partial last
    // pass: stored (its rows past the tile skipped), never loaded (a zero-fill would write there).
    static constexpr bool kWholePasses = kRows % kRowsPerPass == 0;
    static constexpr int kPasses = (kRows + kRowsPerPass - 1) / kRowsPerPass;
    static constexpr int kColBlocks = kCols / kBlockCols;
    static constexpr int kBases = kRowsPerPass % 8 == 0 ? 1 : 8 / kRowsPerPass; // passes per 8 rows
    static_assert((kRowsPerPass % 8 == 0 || 8 % kRowsPerPass == 0) && kCols % kBlockCols == 0);
    static_assert(kPasses % kBases == 0, "the tile is a whole number of 8-row swizzle periods");

    int row;                     // the thread's row in pass 0
    int col;                     // its first column in column block 0
    uint32_t smem_base[kBases];  // bytes from the tile's start to its chunk (row + j * kRowsPerPass, col)

    // Bytes from the tile's start to element (r, c).
    __host__ __device__ static uint32_t byte_offset(int r, int c) { return smem_byte_offset<Element, SmemLayout>(r, c); }

    __host__ __device__ explicit SwizzledTileCopy(int tid)
        : row(tid / kThreadsPerRow), col(tid % kThreadsPerRow * kChunkElems) {
        for (int j = 0; j < kBases; ++j) smem_base[j] = byte_offset(row + j * kRowsPerPass, col);
    }

    // Bytes from the tile's start to this thread's chunk (m, k): a base plus a constant.
    __host__ __device__ uint32_t chunk_smem(int m, int k) const {
        return smem_base[m % kBases] + byte_offset(m / kBases * kBases * kRowsPerPass, k * kBlockCols);
    }

    // Rows [0, rows_valid) of the tile starting at `first_row` (its row 0, column 0; rows
    // `row_stride` elements apart) into the shared tile at `smem_tile`; rows past rows_valid and
    // columns past head_dim are zero-filled (nothing read; `safe` is any readable address).
    __device__ __forceinline__ void load_async(uint32_t smem_tile, const Element* first_row, int64_t row_stride,
                                               int rows_valid, int head_dim, const Element* safe) const {
        static_assert(kWholePasses, "loads fill whole passes");
        for_each_chunk(first_row, row_stride, rows_valid, head_dim, [&](uint32_t offset, const Element* g, bool ok) {
            cp_async_16_or_zero(smem_tile + offset, ok ? g : safe, ok);
        });
    }
    // The same with the rows before rows_begin zero-filled too (nothing read there: a tile that
    // starts before its tensor's first row).
    __device__ __forceinline__ void load_async(uint32_t smem_tile, const Element* first_row, int64_t row_stride,
                                               int rows_begin, int rows_valid, int head_dim, const Element* safe) const {
        static_assert(kWholePasses, "loads fill whole passes");
        for_each_chunk<true>(first_row, row_stride, rows_valid, head_dim, [&](uint32_t offset, const Element* g, bool ok) {
            cp_async_16_or_zero(smem_tile + offset, ok ? g : safe, ok);
        }, rows_begin);
    }

    // The whole tile (every row and column inside the tensor): no predicates, no zero-fill.
    __device__ __forceinline__ void load_async_full(uint32_t smem_tile, const Element* first_row,
                                                    int64_t row_stride) const {
        static_assert(kWholePasses, "loads fill whole passes");
        int64_t pass_stride = row_stride * kRowsPerPass;
        asm volatile("" : "+l"(pass_stride)); // as in for_each_chunk
        const Element* p = first_row + row * row_stride + col;
        CUTE_UNROLL
        for (int m = 0; m < kPasses; ++m) {
            CUTE_UNROLL
            for (int k = 0; k < kColBlocks; ++k) cp_async_16(smem_tile + chunk_smem(m, k), p + k * kBlockCols);
            p += pass_stride;
        }
    }

    // A tile whose rows lie anywhere (a paged pool): pass m's row of this thread starts at
    // pass_row[m] (column 0); predicated and zero-filled as load_async.
    __device__ __forceinline__ void load_async_rows(uint32_t smem_tile, const Element* const (&pass_row)[kPasses],
                                                    int rows_valid, int head_dim, const Element* safe) const {
        static_assert(kWholePasses, "loads fill whole passes");
        const int rows_left = rows_valid - row;
        CUTE_UNROLL
        for (int m = 0; m < kPasses; ++m) {
            CUTE_UNROLL
            for (int k = 0; k < kColBlocks; ++k) {
                const bool ok = m * kRowsPerPass < rows_left && col + k * kBlockCols < head_dim;
                cp_async_16_or_zero(smem_tile + chunk_smem(m, k), ok ? pass_row[m] + col + k * kBlockCols : safe, ok);
            }
        }
    }

    // The shared tile at `smem_tile` to rows [0, rows_valid) and columns [0, head_dim) of the
    // global tile starting at `first_row` (head_dim a multiple of 8: whole chunks).
    __device__ __forceinline__ void store(uint32_t smem_tile, Element* first_row, int64_t row_stride, int rows_valid,
                                          int head_dim) const {
        for_each_chunk(first_row, row_stride, rows_valid, head_dim, [&](uint32_t offset, const Element* g, bool ok) {
            if (ok) {
                uint4 v;
                asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                             : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                             : "r"(smem_tile + offset));
                *reinterpret_cast<uint4*>(const_cast<Element*>(g)) = v;
            }
        });
    }

  private:
    // chunk(shared offset from the tile's start, global address, in bounds) for every chunk.
    // (kRowsBegin: rows before rows_begin are out of bounds too.)
    template <bool kRowsBegin = false, typename Chunk>
    __device__ __forceinline__ void for_each_chunk(const Element* first_row, int64_t row_stride, int rows_valid,
                                                   int head_dim, Chunk&& chunk, int rows_begin = 0) const {
        int64_t pass_stride = row_stride * kRowsPerPass;
        // Opaque to the optimiser: the per-pass products stay inside this call instead of being
        // precomputed, one register pair per pass, in front of the caller's loops.
        asm volatile("" : "+l"(pass_stride));
        const Element* p = first_row + row * row_stride + col;
        if constexpr (!kWholePasses) rows_valid = min(rows_valid, kRows);
        const int rows_left = rows_valid - row, rows_before = rows_begin - row;
        CUTE_UNROLL
        for (int m = 0; m < kPasses; ++m) {
            CUTE_UNROLL
            for (int k = 0; k < kColBlocks; ++k) {
                const bool ok = m * kRowsPerPass < rows_left && (!kRowsBegin || m * kRowsPerPass >= rows_before) &&
                                col + k * kBlockCols < head_dim;
                chunk(chunk_smem(m, k), p + k * kBlockCols, ok);
            }
            p += pass_stride;
        }
    }
};

// 4 bytes global -> shared, or 4 zero bytes when !valid (the per-row lse / dsum of the backward).
__device__ __forceinline__ void cp_async_4_or_zero(void* smem, const void* gmem, bool valid) {
    const uint32_t dst = cast_smem_ptr_to_uint(smem);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(gmem), "r"(valid ? 4 : 0));
}

// Bulk reductions (sm_90): `bytes` of fp32 in shared memory added element by element to global
// memory by the copy engine, tracked by this thread's bulk groups. Both addresses and the size are
// multiples of 16 bytes. The shared source must have been made visible to the async proxy
// (fence.proxy.async by the threads that wrote it, before the barrier that handed it over).
__device__ __forceinline__ void bulk_reduce_add_f32(float* gmem, const float* smem, int bytes) {
    asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"(gmem),
                 "r"(cast_smem_ptr_to_uint(smem)), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit_group() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Until at most N of this thread's bulk groups are pending: done (their writes performed) ...
template <int N>
__device__ __forceinline__ void bulk_wait_group() {
    asm volatile("cp.async.bulk.wait_group %0;\n" ::"n"(N) : "memory");
}
// ... or only done reading their shared source (which may then be overwritten).
template <int N>
__device__ __forceinline__ void bulk_wait_group_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

} // namespace flashattn::cuda::kernels
