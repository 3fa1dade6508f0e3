// Dropout masks, the vector form of include/flashattn/philox.h: kLanes query rows at a time, one
// Philox4x32-10 call per lane per 4 keys, bit-identical to DropoutRow (which the tests check
// against), so every backend, the forward and the backward drop exactly the same elements.

constexpr uint32_t kPhiloxMul0 = 0xD2511F53u, kPhiloxMul1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxWeyl0 = 0x9E3779B9u, kPhiloxWeyl1 = 0xBB67AE85u;

// The random words of keys 4*group .. 4*group+3 for query rows row0 .. row0 + kLanes - 1.
struct DropoutWords {
    UVec word[4];
};

struct DropoutRows {
    uint32_t key0, key1, head_index, offset_lo;
    uint32_t threshold; // keep iff word < threshold

    DropoutRows(const Problem& pr, const Span& span, int64_t h) {
        const DropoutRow reference(pr.dropout_seed(), pr.dropout_offset(), span.batch, pr.p.num_heads, h, 0);
        key0 = reference.key0;
        key1 = reference.key1;
        head_index = reference.head_index;
        offset_lo = reference.offset_lo;
        threshold = dropout_keep_threshold(pr.p.dropout_p);
    }

    // Lane l: query row rows[l] of head index heads[l] (b * num_heads + h), as in DropoutRow.
    FA_INLINE DropoutWords words(UVec rows, UVec heads, uint32_t group) const {
        UVec c0 = UVec{} + group;
        UVec c1 = rows;
        UVec c2 = heads;
        UVec c3 = UVec{} + offset_lo;
        uint32_t k0 = key0, k1 = key1;
        for (int round = 0; round < 10; ++round) {
            const UVec hi0 = mul_high(c0, kPhiloxMul0), lo0 = c0 * kPhiloxMul0;
            const UVec hi1 = mul_high(c2, kPhiloxMul1), lo1 = c2 * kPhiloxMul1;
            c0 = hi1 ^ c1 ^ k0;
            c1 = lo1;
            c2 = hi0 ^ c3 ^ k1;
            c3 = lo0;
            k0 += kPhiloxWeyl0;
            k1 += kPhiloxWeyl1;
        }
        return {{c0, c1, c2, c3}};
    }
    // Lane l: query row row0 + l of this head.
    FA_INLINE DropoutWords words(int64_t row0, uint32_t group) const {
        return words((UVec)lane_index() + static_cast<uint32_t>(row0), UVec{} + head_index, group);
    }

    FA_INLINE IVec kept(UVec word) const { return (IVec)(word < (UVec{} + threshold)); }
};

// Forward: zero the dropped elements of P^T (keys down, tile rows across), keys [j0, j0 + keys)
// (j0 a multiple of 4); column c is query row rows[c] of head index heads[c] (a packed tile mixes
// heads), for c < rows_pad.
inline void drop_transposed(const DropoutRows& dropout, const uint32_t* rows, const uint32_t* heads, float* p_t,
                            int64_t ld, int64_t rows_pad, int64_t j0, int64_t keys) {
    for (int64_t col = 0; col < rows_pad; col += kLanes) {
        UVec row_index, head_index;
        __builtin_memcpy(&row_index, rows + col, sizeof row_index);
        __builtin_memcpy(&head_index, heads + col, sizeof head_index);
        for (int64_t j = 0; j < keys; j += 4) {
            const DropoutWords w = dropout.words(row_index, head_index, static_cast<uint32_t>((j0 + j) >> 2));
            for (int c = 0; c < 4 && j + c < keys; ++c) {
                float* p = p_t + (j + c) * ld + col;
                store(p, select(dropout.kept(w.word[c]), load(p), Vec{}));
            }
        }
    }
}

// Backward: keep[r][j] = 1/(1-p) where (query row i0 + r, key j0 + j) is kept, else 0, for
// r < rows, j < keys_pad (a multiple of 4).
inline void dropout_keep_tile(const DropoutRows& dropout, float keep_scale, float* keep, int64_t ld, int64_t i0,
                              int64_t rows, int64_t j0, int64_t keys_pad) {
    const Vec kept_value = splat(keep_scale);
    for (int64_t r0 = 0; r0 < rows; r0 += kLanes) {
        const int64_t lanes = min64(kLanes, rows - r0);
        for (int64_t j = 0; j < keys_pad; j += 4) {
            const DropoutWords w = dropout.words(i0 + r0, static_cast<uint32_t>((j0 + j) >> 2));
            for (int c = 0; c < 4; ++c) {
                const Vec value = select(dropout.kept(w.word[c]), kept_value, Vec{});
                for (int64_t l = 0; l < lanes; ++l) keep[(r0 + l) * ld + j + c] = value[l];
            }
        }
    }
}
