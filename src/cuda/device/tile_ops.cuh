// Small tile operations of the kernels: the global rows of a head, predicated tile loads and each
// thread's part of them, the tensor-core products with operands from shared memory (ldmatrix), the
// accumulator views and coordinates, and the fp32 -> 16-bit conversion.
#pragma once

#include "device/paged_rows.cuh"
#include "device/score_policies.cuh"

#include <flashattn/flashattn.h>

#include <cute/tensor.hpp>
#include <cutlass/array.h>
#include <cutlass/numeric_conversion.h>

#include <utility>

namespace flashattn::cuda::kernels {

using namespace cute;

// a where kFirst, else b: a reference to one of two objects of different types, chosen at compile
// time. A function, not a lambda returning its capture, which nvcc flags as returning a reference
// to a local (warning 836).
template <bool kFirst, typename A, typename B>
__device__ __forceinline__ const auto& first_if(const A& a, const B& b) {
    if constexpr (kFirst) return a;
    else return b;
}

// Rows [row0, row0 + rows) of one head of t, as a (rows, kHeadDim) global tensor with 64-bit
// offsets: t is (batch, rows, heads, d) with batch entry `batch`, or varlen (total rows, heads, d)
// with row0 counted from its first row. Consecutive rows lie row_stride apart: t's row stride, or
// its head stride where a tile's rows are the heads of a group (packed GQA).
template <typename Element, int kHeadDim>
__device__ __forceinline__ auto head_rows(const fa_tensor& t, bool varlen, int64_t batch, int64_t row0, int head,
                                          int rows, int64_t row_stride) {
    const int64_t offset = (varlen ? 0 : batch * t.batch_stride) + row0 * row_stride + head * t.head_stride;
    return make_tensor(make_gmem_ptr(static_cast<Element*>(t.data) + offset), make_shape(rows, Int<kHeadDim>{}),
                       make_stride(row_stride, _1{}));
}
// The same where a dense sequence starts at row 0 of its batch entry (no KV cache, no packed heads):
// one offset product fewer.
template <typename Element, int kHeadDim>
__device__ __forceinline__ auto head_rows(const fa_tensor& t, bool varlen, int64_t batch, int64_t row0, int head,
                                          int rows) {
    const int64_t offset = (varlen ? row0 * t.row_stride : batch * t.batch_stride) + head * t.head_stride;
    return make_tensor(make_gmem_ptr(static_cast<Element*>(t.data) + offset), make_shape(rows, Int<kHeadDim>{}),
                       make_stride(t.row_stride, _1{}));
}

// The global rows of a forward work item, with 64-bit offsets; the column extent is the tile's head
// dim (columns at or past args.head_dim are never touched): Q and O of (sequence b, query head h),
// or with packed GQA heads the rows are the group's heads, head_stride apart; K and V of KV head
// h_kv, from the sequence's batch entry and first key row. The forward's and the decode kernel's.
template <typename Element, int kHeadDim>
struct ItemRows {
    using Rows = decltype(head_rows<Element, kHeadDim>(fa_tensor{}, false, 0, 0, 0, 0, 0));
    Rows q, k, v, o;
};
template <typename Element, int kHeadDim>
__device__ __forceinline__ ItemRows<Element, kHeadDim> item_rows(const FwdArgs& args, const SequenceBounds& seq, int b,
                                                                 int h, int h_kv, bool packed) {
    const bool varlen = args.cu_seqlens_q != nullptr;
    auto rows_of = [&](const fa_tensor& t, int64_t batch, int64_t row0, int head, int rows, int64_t row_stride) {
        return head_rows<Element, kHeadDim>(t, varlen, batch, row0, head, rows, row_stride);
    };
    return {rows_of(args.q, b, seq.q_row0, h, seq.q_len, packed ? args.q.head_stride : args.q.row_stride),
            rows_of(args.k, seq.k_batch, seq.k_row0, h_kv, seq.k_len, args.k.row_stride),
            rows_of(args.v, seq.k_batch, seq.k_row0, h_kv, seq.k_len, args.v.row_stride),
            rows_of(args.out, b, seq.q_row0, h, seq.q_len, packed ? args.out.head_stride : args.out.row_stride)};
}

// An m16n8 accumulator fragment ((2 columns, 2 rows), MMA_M, MMA_N) seen as (rows, columns), so
// that row-wise softmax code can index it as a matrix.
template <typename Layout>
__device__ __forceinline__ constexpr auto rows_cols(Layout layout) {
    static_assert(decltype(rank(layout))::value == 3);
    static_assert(decltype(size<0>(layout))::value == 4);
    return make_layout(make_layout(get<0, 1>(layout), get<1>(layout)),
                       make_layout(get<0, 0>(layout), get<2>(layout)));
}

// The (row, column) coordinates of this thread's accumulator registers of a (kRows, kCols) tile,
// seen as (rows, columns) like the accumulator itself (rows_cols).
template <int kRows, int kCols, typename ThrMma>
__device__ __forceinline__ auto accumulator_coords(ThrMma const& thr_mma) {
    Tensor coords = thr_mma.partition_C(make_identity_tensor(Shape<Int<kRows>, Int<kCols>>{}));
    return make_tensor(coords.data(), rows_cols(coords.layout()));
}

// The accumulator of S (MMA_N n8 tiles) reused as the A operand of P.V: two neighbouring n8
// accumulator tiles hold exactly the registers of one k16 A fragment, so P never leaves registers.
template <typename Layout>
__device__ __forceinline__ constexpr auto accumulator_as_a_operand(Layout layout) {
    static_assert(decltype(size<2>(layout))::value % 2 == 0);
    auto split = logical_divide(layout, Shape<Underscore, Underscore, _2>{}); // ((2,2), MMA_M, (2, MMA_N/2))
    return make_layout(make_layout(get<0>(split), get<2, 0>(split)), get<1>(split), get<2, 1>(split));
}

// fp32 fragment -> 16-bit fragment of the same layout (packed cvt, two values per instruction).
template <typename To, typename Engine, typename Layout>
__device__ __forceinline__ auto convert_fragment(Tensor<Engine, Layout> const& from) {
    using From = typename Engine::value_type;
    constexpr int kSize = decltype(size(from))::value;
    Tensor to = make_tensor<To>(from.layout());
    cutlass::NumericArrayConverter<To, From, kSize> convert;
    *reinterpret_cast<cutlass::Array<To, kSize>*>(to.data()) =
        convert(*reinterpret_cast<cutlass::Array<From, kSize> const*>(from.data()));
    return to;
}

// Which of one thread's 16-byte column chunks (mode 2 of a partitioned (row, column) identity
// tensor) hold real head-dim columns: the tile's head dim is the compiled one, at least head_dim.
template <typename Coords>
__device__ __forceinline__ auto head_dim_chunks(Coords const& coords, int head_dim) {
    Tensor ok = make_tensor<bool>(make_shape(size<2>(coords)));
    CUTE_UNROLL
    for (int k = 0; k < size(ok); ++k) ok(k) = get<1>(coords(0, 0, k)) < head_dim;
    return ok;
}

// Visits one thread's 16-byte chunks of a global -> shared tile copy: chunk(m, k, in_bounds), where
// in_bounds says the chunk's row is before `rows_valid` and its columns are real head-dim columns
// (column_ok(k)). Rows are compared relative to this thread's first row: compile-time offsets
// (see apply_key_mask).
template <typename Dst, typename Coords, typename ColumnOk, typename Chunk>
__device__ __forceinline__ void for_each_tile_chunk(Dst const& dst, Coords const& coords, ColumnOk const& column_ok,
                                                    int rows_valid, Chunk&& chunk) {
    const int row0 = get<0>(coords(0, 0, 0));
    const int rows_left = rows_valid - row0;
    CUTE_UNROLL
    for (int m = 0; m < size<1>(dst); ++m) {
        const bool row_ok = get<0>(coords(0, m, 0)) - row0 < rows_left;
        CUTE_UNROLL
        for (int k = 0; k < size<2>(dst); ++k) chunk(m, k, row_ok && column_ok(k));
    }
}

// Global -> shared copy of one tile, 16 bytes per cp.async. Rows at or past `rows_valid` and
// chunks whose columns lie past the real head dim are zero-filled with plain shared stores and
// never addressed in global memory: the ragged tail of a sequence reads nothing out of bounds,
// and zero K/V rows and columns keep NaN garbage out of Q.K^T and P.V.
template <typename TiledCopy, typename Src, typename Dst, typename Coords, typename ColumnOk>
__device__ __forceinline__ void load_tile(TiledCopy const& tiled_copy, Src const& src, Dst&& dst, Coords const& coords,
                                          ColumnOk const& column_ok, int rows_valid) {
    for_each_tile_chunk(dst, coords, column_ok, rows_valid, [&](int m, int k, bool in_bounds) {
        if (in_bounds) {
            copy(tiled_copy, src(_, m, k), dst(_, m, k));
        } else {
            clear(dst(_, m, k));
        }
    });
}

// One thread's partitions of a tile's global -> shared copy: g in global memory, s in shared memory
// (CuTe's tXg and tXs).
template <typename Global, typename Shared>
struct TileParts {
    Global g;
    Shared s;
};

// One thread's part of a kernel's global -> shared tile loads (GmemLoad, gmem_copies.cuh, over the
// CTA's threads or a warp's lanes): its partitions of a tile, and the (row, column) coordinates of
// its chunks in a tile of query rows (kBlockM) or of key rows (kBlockN), for the predicates. The
// coordinates are made on request, not kept as members, so that each kernel decides where they are
// computed (one that uses them in several places or under a branch keeps them in locals): the
// register allocation of the kernels at their limit follows where the prologue computes what.
template <typename GmemLoad, int kBlockM, int kBlockN, int kHeadDim>
struct TileLoads {
    GmemLoad copy;
    decltype(GmemLoad{}.get_thread_slice(0)) thr;

    __device__ __forceinline__ explicit TileLoads(int tid) : thr(copy.get_thread_slice(tid)) {}

    __device__ __forceinline__ auto q_coords() const {
        return thr.partition_S(make_identity_tensor(Shape<Int<kBlockM>, Int<kHeadDim>>{}));
    }
    __device__ __forceinline__ auto kv_coords() const {
        return thr.partition_S(make_identity_tensor(Shape<Int<kBlockN>, Int<kHeadDim>>{}));
    }

    template <typename GlobalTile, typename SharedTile>
    __device__ __forceinline__ auto partition(GlobalTile const& global, SharedTile const& shared) const {
        using Parts = TileParts<decltype(thr.partition_S(global)), decltype(thr.partition_D(shared))>;
        return Parts{thr.partition_S(global), thr.partition_D(shared)};
    }

    // Which of this thread's 16-byte column chunks hold real head-dim columns: the same in every
    // (rows x head dim) tile, so one serves Q, K, V and O (and dO, dK, dV).
    __device__ __forceinline__ auto column_ok(int head_dim) const { return head_dim_chunks(kv_coords(), head_dim); }

    // One tile of query rows (Q, dO) or of key rows (K, V) into shared memory: load_tile.
    template <typename Src, typename Dst, typename ColumnOk>
    __device__ __forceinline__ void query_tile(Src const& src, Dst&& dst, ColumnOk const& column_ok,
                                               int rows_valid) const {
        load_tile(copy, src, dst, q_coords(), column_ok, rows_valid);
    }
    template <typename Src, typename Dst, typename ColumnOk>
    __device__ __forceinline__ void key_tile(Src const& src, Dst&& dst, ColumnOk const& column_ok,
                                             int rows_valid) const {
        load_tile(copy, src, dst, kv_coords(), column_ok, rows_valid);
    }
};

// The page slots of the rows one thread copies in a tile load: one per row pass (the tiled copy
// spreads a pass's 16 or 32 rows over the CTA, one row per thread). A tile of 64 or 128 keys can
// span pages (page sizes are multiples of 16, and left padding shifts the rows), so every pass
// looks its row up; K and V of one block share the lookups (the same rows, the same table).
template <int kPasses>
struct PageSlots {
    PageSlot pass[kPasses];
    __device__ __forceinline__ PageSlot& operator[](int m) { return pass[m]; }
    __device__ __forceinline__ PageSlot const& operator[](int m) const { return pass[m]; }
};

// Rows `first_row + r` of the table's sequence for the thread's tile rows r < rows_valid (the
// others are not read).
template <typename Coords>
__device__ __forceinline__ auto page_slots(PageTable& table, Coords const& coords, int rows_valid, int64_t first_row) {
    PageSlots<decltype(size<1>(coords))::value> out;
    CUTE_UNROLL
    for (int m = 0; m < size<1>(coords); ++m) {
        const int r = get<0>(coords(0, m, 0));
        out[m] = r < rows_valid ? table.slot(uint32_t(first_row + r)) : PageSlot{0, 0};
    }
    return out;
}

// load_tile for a paged pool, the rows' page slots resolved beforehand (PageTable::slots). Tile
// rows r < rows_valid are copied; the rest and the columns past the head dim are zero-filled, as
// in load_tile.
template <typename TiledCopy, typename Dst, typename Coords, typename ColumnOk, typename Element, int kPasses>
__device__ __forceinline__ void load_tile_paged(TiledCopy const& tiled_copy, Dst&& dst, Coords const& coords,
                                                ColumnOk const& column_ok, int rows_valid, Element* head_base,
                                                int64_t block_stride, int64_t row_stride,
                                                PageSlots<kPasses> const& slots) {
    static_assert(kPasses == decltype(size<1>(dst))::value);
    CUTE_UNROLL
    for (int m = 0; m < size<1>(dst); ++m) {
        const bool row_ok = get<0>(coords(0, m, 0)) < rows_valid;
        const int64_t offset = int64_t(slots[m].block) * block_stride + int64_t(slots[m].row) * row_stride;
        CUTE_UNROLL
        for (int k = 0; k < size<2>(dst); ++k) {
            if (row_ok && column_ok(k)) {
                Tensor src = make_tensor(make_gmem_ptr(head_base + offset + get<1>(coords(0, m, k))),
                                         make_layout(shape(dst(_, m, k))));
                copy(tiled_copy, src, dst(_, m, k));
            } else {
                clear(dst(_, m, k));
            }
        }
    }
}

// Shared -> global copy of one output tile (both kernels stage O in shared memory so that the
// global stores are whole 16-byte chunks): rows at or past `rows_valid` and chunks past the real
// head dim are never written.
template <typename GmemStore, typename SmemTile, typename GmemTile, typename ColumnOk>
__device__ __forceinline__ void store_tile(int tid, SmemTile const& smem_tile, GmemTile&& gmem_tile,
                                           ColumnOk const& column_ok, int rows_valid) {
    GmemStore gmem_store;
    auto store_thr = gmem_store.get_thread_slice(tid);
    Tensor src = store_thr.partition_S(smem_tile);
    Tensor dst = store_thr.partition_D(gmem_tile);
    Tensor coords = store_thr.partition_D(make_identity_tensor(product_each(shape(smem_tile))));
    Tensor staged = make_tensor<typename SmemTile::value_type>(shape(src));
    copy(gmem_store, src, staged);
    const int row0 = get<0>(coords(0, 0, 0)); // rows relative to it: compile-time offsets
    const int rows_left = rows_valid - row0;
    CUTE_UNROLL
    for (int m = 0; m < size<1>(staged); ++m) {
        if (get<0>(coords(0, m, 0)) - row0 >= rows_left) continue;
        CUTE_UNROLL
        for (int k = 0; k < size<2>(staged); ++k) {
            if (column_ok(k)) copy(gmem_store, staged(_, m, k), dst(_, m, k));
        }
    }
}

// acc += A.B with both operands in shared memory (smem_a, smem_b: this thread's parts of the tiles
// as sources of the ldmatrix copies copy_a, copy_b): ldmatrix of the next k slice is issued before
// the MMAs of the current one.
template <typename TiledMma, typename Acc, typename FragA, typename FragB, typename SmemA, typename SmemB,
          typename CopyA, typename CopyB>
__device__ __forceinline__ void gemm_smem(TiledMma& mma, Acc& acc, FragA& frag_a, FragB& frag_b, SmemA const& smem_a,
                                          SmemB const& smem_b, CopyA const& copy_a, CopyB const& copy_b) {
    CUTE_STATIC_ASSERT_V(size<1>(frag_a) == size<1>(acc));
    CUTE_STATIC_ASSERT_V(size<1>(frag_b) == size<2>(acc));
    CUTE_STATIC_ASSERT_V(size<2>(frag_a) == size<2>(frag_b));
    Tensor a_view = make_tensor(frag_a.data(), CopyA::retile(frag_a.layout()));
    Tensor b_view = make_tensor(frag_b.data(), CopyB::retile(frag_b.layout()));
    copy(copy_a, smem_a(_, _, _0{}), a_view(_, _, _0{}));
    copy(copy_b, smem_b(_, _, _0{}), b_view(_, _, _0{}));
    CUTE_UNROLL
    for (int k = 0; k < size<2>(frag_a); ++k) {
        if (k + 1 < size<2>(frag_a)) {
            copy(copy_a, smem_a(_, _, k + 1), a_view(_, _, k + 1));
            copy(copy_b, smem_b(_, _, k + 1), b_view(_, _, k + 1));
        }
        gemm(mma, frag_a(_, _, k), frag_b(_, _, k), acc);
    }
}

// acc += A.B with A already in registers (P) and B in shared memory (V^T).
template <typename TiledMma, typename Acc, typename FragA, typename FragB, typename SmemB, typename CopyB>
__device__ __forceinline__ void gemm_regs_smem(TiledMma& mma, Acc& acc, FragA const& frag_a, FragB& frag_b,
                                               SmemB const& smem_b, CopyB const& copy_b) {
    CUTE_STATIC_ASSERT_V(size<1>(frag_a) == size<1>(acc));
    CUTE_STATIC_ASSERT_V(size<1>(frag_b) == size<2>(acc));
    CUTE_STATIC_ASSERT_V(size<2>(frag_a) == size<2>(frag_b));
    Tensor b_view = make_tensor(frag_b.data(), CopyB::retile(frag_b.layout()));
    copy(copy_b, smem_b(_, _, _0{}), b_view(_, _, _0{}));
    CUTE_UNROLL
    for (int k = 0; k < size<2>(frag_a); ++k) {
        if (k + 1 < size<2>(frag_a)) copy(copy_b, smem_b(_, _, k + 1), b_view(_, _, k + 1));
        gemm(mma, frag_a(_, _, k), frag_b(_, _, k), acc);
    }
}

// One thread's side of a tensor-core product acc += A B (TiledMma, mma.sync) whose operands are read
// from shared tiles by ldmatrix (AtomA, AtomB: the copies of operands A and B): a and b are its parts
// of the tiles, the copies' sources; a product on another stage or buffer of the same layout passes
// them shifted. The register fragments and the copies are made per product, as they hold nothing
// from one product to the next (decode's Q, kept in registers, is the exception: a_fragment,
// load_a). Only the parts are members: with the MMA's and the copies' thread slices beside them, the
// compiler placed the parts' address arithmetic elsewhere, and the kernels' spills changed.
template <typename TiledMma, typename AtomA, typename AtomB, typename TileA, typename TileB>
struct SmemGemm {
    using CopyA = decltype(make_tiled_copy_A(AtomA{}, TiledMma{}));
    using CopyB = decltype(make_tiled_copy_B(AtomB{}, TiledMma{}));
    using ThrMma = decltype(TiledMma{}.get_thread_slice(0));
    using FragA = decltype(std::declval<ThrMma const&>().partition_fragment_A(std::declval<TileA const&>()));
    using FragB = decltype(std::declval<ThrMma const&>().partition_fragment_B(std::declval<TileB const&>()));

    decltype(CopyA{}.get_thread_slice(0).partition_S(std::declval<TileA const&>())) a;
    decltype(CopyB{}.get_thread_slice(0).partition_S(std::declval<TileB const&>())) b;

    // acc += A B, A and B read at a_part and b_part (a and b, or views of them shifted).
    template <typename Acc, typename PartA, typename PartB>
    __device__ __forceinline__ void operator()(Acc& acc, PartA const& a_part, PartB const& b_part) const {
        TiledMma mma;
        FragA frag_a;
        FragB frag_b;
        gemm_smem(mma, acc, frag_a, frag_b, a_part, b_part, CopyA{}, CopyB{});
    }

    // A in registers: a_fragment() filled once by load_a, then acc += A B with only B read.
    __device__ __forceinline__ static FragA a_fragment() { return FragA{}; }
    __device__ __forceinline__ void load_a(FragA& frag_a) const {
        Tensor a_view = make_tensor(frag_a.data(), CopyA::retile(frag_a.layout()));
        copy(CopyA{}, a, a_view);
    }
    template <typename Acc, typename PartB>
    __device__ __forceinline__ void with_a(Acc& acc, FragA const& frag_a, PartB const& b_part) const {
        TiledMma mma;
        FragB frag_b;
        gemm_regs_smem(mma, acc, frag_a, frag_b, b_part, CopyB{});
    }
};
template <typename TiledMma, typename AtomA, typename AtomB, typename TileA, typename TileB>
__device__ __forceinline__ auto smem_gemm(int tid, TileA const& tile_a, TileB const& tile_b) {
    using Gemm = SmemGemm<TiledMma, AtomA, AtomB, TileA, TileB>;
    return Gemm{typename Gemm::CopyA{}.get_thread_slice(tid).partition_S(tile_a),
                typename Gemm::CopyB{}.get_thread_slice(tid).partition_S(tile_b)};
}

// The same for a product whose A operand is in registers (P, from the S accumulator): only B is read
// from shared memory (AtomB, tile b).
template <typename TiledMma, typename AtomB, typename TileB>
struct RegsSmemGemm {
    using CopyB = decltype(make_tiled_copy_B(AtomB{}, TiledMma{}));
    using ThrMma = decltype(TiledMma{}.get_thread_slice(0));
    using FragB = decltype(std::declval<ThrMma const&>().partition_fragment_B(std::declval<TileB const&>()));

    decltype(CopyB{}.get_thread_slice(0).partition_S(std::declval<TileB const&>())) b;

    template <typename Acc, typename FragA, typename PartB>
    __device__ __forceinline__ void operator()(Acc& acc, FragA const& frag_a, PartB const& b_part) const {
        TiledMma mma;
        FragB frag_b;
        gemm_regs_smem(mma, acc, frag_a, frag_b, b_part, CopyB{});
    }
};
template <typename TiledMma, typename AtomB, typename TileB>
__device__ __forceinline__ auto regs_smem_gemm(int tid, TileB const& tile_b) {
    using Gemm = RegsSmemGemm<TiledMma, AtomB, TileB>;
    return Gemm{typename Gemm::CopyB{}.get_thread_slice(tid).partition_S(tile_b)};
}

} // namespace flashattn::cuda::kernels
