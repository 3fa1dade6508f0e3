// The one matrix-product kernel behind every product of the forward and the backward:
//
//     for each register tile:  acc[MR x NV vectors] = A[rows, 0:depth] * B[0:depth, cols]
//                              epilogue.finish(acc, row0, col0)
//
// A is read one element at a time and broadcast (so it can sit in any layout: RowMajor, ColMajor),
// B row k is contiguous along the output columns (rows ldb floats apart), and what happens to a
// finished tile -- store, turn into probabilities, accumulate into dK -- is the epilogue's business.
// The tile is MR x (NV * kLanes): 6 x 16 on AVX2 (12 accumulators + 2 B vectors + 1 broadcast =
// 15 of 16 ymm registers), 12 x 32 on AVX-512 (27 of 32 zmm). Per depth step it issues NV loads and
// MR broadcasts for MR * NV FMAs, so the FMA ports, not the load ports, set the pace.

constexpr int kTileRows = FA_CPU_TILE_ROWS;
constexpr int kTileVectors = FA_CPU_TILE_VECTORS;
constexpr int kPanelWidth = kTileVectors * kLanes; // output columns per B panel

// A(r, k) = data[r * ld + k]
struct RowMajor {
    const float* data;
    int64_t ld;
    FA_INLINE const float* at(int64_t r, int64_t k) const { return data + r * ld + k; }
    FA_INLINE RowMajor rows_from(int64_t r) const { return {data + r * ld, ld}; }
};

// A(r, k) = data[k * ld + r]
struct ColMajor {
    const float* data;
    int64_t ld;
    FA_INLINE const float* at(int64_t r, int64_t k) const { return data + k * ld + r; }
    FA_INLINE ColMajor rows_from(int64_t r) const { return {data + r, ld}; }
};

template <int MR, int NV>
struct Tile {
    Vec acc[MR][NV];
};

// For epilogues with many live values (exp2's constants, mask bounds): inlined into the product,
// the compiler hoists those above the depth loop and spills accumulators inside it (measured: a 35%
// slower S^T product). Out of line (taking the tile by value), it costs one store and reload of the
// tile per call instead.
#define FA_OUT_OF_LINE __attribute__((noinline))

template <int N>
struct Int {
    static constexpr int value = N;
};

// 0 that the compiler cannot see through. The Tile an out-of-line epilogue receives by value lives in
// memory; when the tile is a plain copy of the accumulators, GCC may give an accumulator the tile's
// memory as its home for the whole depth loop (an FMA, a store and a reload per step: a 3x slower
// product for one-vector-wide tiles such as decode's S^T). Adding an opaque 0 makes the tile a new
// value, so the accumulators stay in registers; one add per accumulator per tile.
FA_INLINE Vec opaque_zero() {
    Vec zero = {};
#if defined(__x86_64__) || (defined(__i386__) && defined(__SSE__)) // a Vec fits an xmm/ymm/zmm register
    __asm__("" : "+x"(zero));
#elif defined(__aarch64__)
    __asm__("" : "+w"(zero));
#endif
    return zero;
}

template <int MR, int NV, class A, class Epilogue>
FA_INLINE void tile_product(const A& a, const float* b, int64_t ldb, int64_t depth, Epilogue& epilogue,
                            int64_t row0, int64_t col0) {
    Vec acc[MR][NV];
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[r][v] = Vec{};
    for (int64_t k = 0; k < depth; ++k) {
        Vec bk[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) bk[v] = load(b + k * ldb + v * kLanes);
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            const Vec ar = broadcast(a.at(r, k));
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[r][v] += ar * bk[v];
        }
    }
    // The epilogue's tile is a sum, not a copy, of the accumulators: see opaque_zero.
    const Vec zero = opaque_zero();
    Tile<MR, NV> tile;
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) tile.acc[r][v] = acc[r][v] + zero;
    epilogue.finish(tile, row0, col0);
}

// The plainest epilogue: c += tile, or c = tile (kAssign: e.g. the first contribution to a buffer).
template <bool kAssign>
struct Accumulate {
    float* c;
    int64_t ld;

    template <int MR, int NV>
    FA_INLINE void finish(const Tile<MR, NV>& tile, int64_t row0, int64_t col0) {
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            float* row = c + (row0 + r) * ld + col0;
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v)
                store(row + v * kLanes, kAssign ? tile.acc[r][v] : load(row + v * kLanes) + tile.acc[r][v]);
        }
    }
};

template <int NV, class Body>
FA_INLINE void with_tile_vectors(int vectors, Body&& body) {
    if constexpr (NV > 1) {
        if (vectors < NV) return with_tile_vectors<NV - 1>(vectors, body);
    }
    body(Int<NV>{});
}

// The rows left at a block's bottom edge, in tiles of MR, MR/2, ..., 1 rows: a handful of tile
// heights instead of one per height keeps the build fast, and edge tiles are rare.
template <int MR, int NV, class A, class Epilogue>
FA_INLINE void edge_rows(int64_t rows, int64_t& row0, const A& a, const float* b, int64_t ldb, int64_t depth,
                         Epilogue& epilogue, int64_t col0) {
    for (; row0 + MR <= rows; row0 += MR)
        tile_product<MR, NV>(a.rows_from(row0), b, ldb, depth, epilogue, row0, col0);
    if constexpr (MR > 1) edge_rows<MR / 2, NV>(rows, row0, a, b, ldb, depth, epilogue, col0);
}

// out[rows x cols] via epilogue, cols a multiple of kLanes. B panels (kPanelWidth columns of B,
// depth rows) are the outer loop so a panel stays in L1 while A's rows stream past it.
template <class A, class Epilogue>
inline void matmul(int64_t rows, int64_t cols, int64_t depth, const A& a, const float* b, int64_t ldb,
                   Epilogue& epilogue) {
    for (int64_t col0 = 0; col0 < cols; col0 += kPanelWidth) {
        const int64_t vectors_left = (cols - col0) / kLanes;
        const int vectors = vectors_left < kTileVectors ? static_cast<int>(vectors_left) : kTileVectors;
        const float* panel = b + col0;
        with_tile_vectors<kTileVectors>(vectors, [&](auto nv) {
            constexpr int NV = decltype(nv)::value;
            int64_t row0 = 0;
            for (; row0 + kTileRows <= rows; row0 += kTileRows)
                tile_product<kTileRows, NV>(a.rows_from(row0), panel, ldb, depth, epilogue, row0, col0);
            if (row0 < rows) edge_rows<kTileRows / 2, NV>(rows, row0, a, panel, ldb, depth, epilogue, col0);
        });
    }
}
