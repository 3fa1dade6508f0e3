// The score policy: what happens between "q . k" and "exp2": scale, softcap, ALiBi, mask. It is
// the vector form of flashattn::transform_score and MaskSpec (core/problem.h), applied to a whole
// register tile in the epilogue of the Q K^T product, and only where needed: a block whose keys
// every query row may see skips the mask, a block no row may see is never computed.
//
// Scores leave this file in natural units (the scaled, transformed score), and the row maxima and
// lse stay in them: a probability is exp2((t - m) * log2 e), the maximum subtracted before the
// multiply. t - m is exact where t is near m (the entries that matter), so no rounding at the
// scores' own magnitude (large under ALiBi over long distances, or with peaky rows) reaches P, as it
// does with FlashAttention's folded t * log2 e - m * log2 e (one FMA, for a GPU's sake).

struct ScoreParams {
    float scale;       // softmax scale
    float softcap;     // 0 = off
    float alibi_slope; // the head's slope (one head per block); a packed forward tile has one per row
    bool alibi;        // ALiBi applies to some row of the block
    int64_t diagonal;  // k_len - q_len: query row i sits at key position i + diagonal

    bool transforms() const { return softcap > 0.0f || alibi; }
};

inline ScoreParams score_params(const Problem& pr, const Span& s, int64_t h) {
    const float slope = pr.alibi_slope(s.batch, h);
    return {pr.scale, pr.p.softcap, slope, slope != 0.0f, s.k_len - s.q_len};
}

// transform_score(s) for a scaled score s = scale * q.k, where offset = i + diagonal - j
// (ALiBi's signed distance) and slope the ALiBi slope of each lane's query row. *tanh_slope
// receives d(capped)/d(uncapped) = 1 - tanh^2 when softcap is on (the backward needs it).
FA_INLINE Vec transformed_score(Vec s, Vec offset, Vec slope, const ScoreParams& sp, Vec* tanh_slope) {
    if (sp.softcap > 0.0f) {
        const Vec t = tanh(s / splat(sp.softcap));
        s = splat(sp.softcap) * t;
        *tanh_slope = splat(1.0f) - t * t;
    }
    if (sp.alibi) s -= slope * abs(offset);
    return s;
}
// ... with the block's one slope.
FA_INLINE Vec transformed_score(Vec s, Vec offset, const ScoreParams& sp, Vec* tanh_slope) {
    return transformed_score(s, offset, splat(sp.alibi_slope), sp, tanh_slope);
}

// Which keys each query row of a forward tile may see: [begin, end) from MaskSpec::keys_for_row,
// clamped to the keys that exist; an empty range (and a padding column) is stored as begin == end.
inline void compute_row_ranges(const Problem& pr, const Span& s, const TileRows& tile, int32_t* begin,
                               int32_t* end) {
    for (int64_t r = 0; r < tile.rows_pad; ++r) {
        int64_t b = 0, e = 0;
        if (r < tile.rows) {
            const KeyRange range = pr.mask.keys_for_row(tile.row(r), s.q_len, s.k_len);
            b = max64(range.begin, 0);
            e = min64(range.end, s.k_len);
            if (e < b) e = b;
        }
        begin[r] = static_cast<int32_t>(b);
        end[r] = static_cast<int32_t>(e);
    }
}

// ... for rows [i0, i0 + rows) of one head.
inline void compute_row_ranges(const Problem& pr, const Span& s, int64_t i0, int64_t rows, int64_t rows_pad,
                               int32_t* begin, int32_t* end) {
    compute_row_ranges(pr, s, TileRows{i0, rows, rows_pad, 1, 0}, begin, end);
}

// The union of the rows' ranges, as the key interval worth visiting: [first, last).
struct KeySpan {
    int64_t first, last;
};
inline KeySpan visited_keys(const int32_t* begin, const int32_t* end, int64_t rows) {
    KeySpan span{INT64_MAX, 0};
    for (int64_t r = 0; r < rows; ++r) {
        if (begin[r] >= end[r]) continue;
        span.first = min64(span.first, begin[r]);
        span.last = max64(span.last, end[r]);
    }
    if (span.first >= span.last) span = {0, 0};
    return span;
}

enum class Coverage { none, partial, full };

// How the block's rows see keys [j0, j1): not at all (skip it), all of them (no mask), or some.
inline Coverage coverage(const int32_t* begin, const int32_t* end, int64_t rows, int64_t j0, int64_t j1) {
    bool any = false, all = true;
    for (int64_t r = 0; r < rows; ++r) {
        const bool sees_some = begin[r] < j1 && end[r] > j0 && begin[r] < end[r];
        const bool sees_all = begin[r] <= j0 && end[r] >= j1;
        any |= sees_some;
        all &= sees_all;
    }
    return !any ? Coverage::none : all ? Coverage::full : Coverage::partial;
}

// Calls body(Int<a>, Int<b>) with two runtime flags turned into constants, e.g. (transform, mask)
// so that the common case -- no softcap, no ALiBi, unmasked block -- compiles to a bare multiply.
template <class Body>
FA_INLINE void with_flags(bool a, bool b, Body&& body) {
    if (a) {
        if (b) body(Int<1>{}, Int<1>{});
        else body(Int<1>{}, Int<0>{});
    } else {
        if (b) body(Int<0>{}, Int<1>{});
        else body(Int<0>{}, Int<0>{});
    }
}
