// The FA2 forward on the CPU. One task = one block of query rows of one (sequence, head); the
// task walks the key/value blocks its rows may see, keeping per row a running maximum m and sum l
// and an unnormalised output O in fp32 scratch, and divides once at the end:
//
//   S^T = K_blk Q_blk^T            (tile products; the score policy runs in their epilogue)
//   m'  = max(m, rowmax S)   alpha = 2^(m - m')   P = 2^(S - m')   l = alpha l + rowsum P
//   O   = alpha O + dropout(P) V   (alpha folded into the product's epilogue)
//   out = O / l                    lse = (m + log2 l) ln 2
//
// S is kept transposed (keys down, query rows across the vector lanes) so that the row max, the
// exponentials and the row sums are plain vertical vector operations, with no horizontal reduction:
// the per-row statistics of kLanes rows live in one vector.
//
// Lazy rescaling: once every row has a maximum, a block whose scores stay below it + kLazyRescale
// (log2 units) keeps the old maximum as the exponent offset. Its exponentials and row sums then
// happen right in the S^T product's epilogue, and O accumulates without rescaling; P values up to
// 2^kLazyRescale are harmless in fp32. A block that does raise a maximum that far is redone the
// classic way above. After the first block this is almost every block; when it is not (scores
// that keep rising along the keys), the lazy attempts back off exponentially.

struct ForwardLayout {
    int64_t block_q, block_k, head_dim, head_dim_pad;
};

// K and V as fp32 rows: the caller's memory, or a copy packed once before the tasks run.
struct ForwardInputs {
    RowsSource k, v;
};

struct ForwardScratch {
    float* q_t;       // head_dim x block_q: Q block transposed (B operand of S^T)
    float* s_t;       // block_k x block_q: scores, then probabilities, transposed
    float* o;         // block_q x head_dim_pad: unnormalised output
    float* row_max;   // per query row, log2 units: the running maximum m
    float* row_sum;   // the running l, relative to `shift`
    float* shift;     // the exponent offset in use: P = 2^(S - shift); a past maximum (0 while none)
    float* block_max; // max of the current block's scores per row
    float* block_sum; // row sums of the current block's P (lazy path)
    float* rescale;   // alpha per row for the current block (classic path)
    int32_t* key_begin;
    int32_t* key_end;
};

// Bump allocation of 64-byte aligned pieces from one per-thread slab.
struct SlabCarver {
    char* next;
    size_t used = 0;
    template <class T>
    T* take(int64_t count) {
        const size_t bytes = (static_cast<size_t>(count) * sizeof(T) + 63) & ~size_t(63);
        T* piece = next ? reinterpret_cast<T*>(next + used) : nullptr;
        used += bytes;
        return piece;
    }
};

inline ForwardScratch carve_forward_scratch(const ForwardLayout& lay, char* slab, size_t* bytes) {
    SlabCarver c{slab};
    ForwardScratch s;
    s.q_t = c.take<float>(lay.head_dim * lay.block_q);
    s.s_t = c.take<float>(lay.block_k * lay.block_q);
    s.o = c.take<float>(lay.block_q * lay.head_dim_pad);
    s.row_max = c.take<float>(lay.block_q);
    s.row_sum = c.take<float>(lay.block_q);
    s.shift = c.take<float>(lay.block_q);
    s.block_max = c.take<float>(lay.block_q);
    s.block_sum = c.take<float>(lay.block_q);
    s.rescale = c.take<float>(lay.block_q);
    s.key_begin = c.take<int32_t>(lay.block_q);
    s.key_end = c.take<int32_t>(lay.block_q);
    if (bytes) *bytes = c.used;
    return s;
}

// Epilogue of S^T = K Q^T: score policy, then the block's running row max, and with kExp the
// probabilities 2^(t - shift) and their row sums too (lazy path). Tile rows are keys, tile columns
// are query rows. The scale is applied here, not folded into Q: the backward then
// recomputes bit-identical scores (same products, same order, same multiply), so its P is
// normalised by exactly the lse the forward saw.
template <bool kTransform, bool kMask, bool kExp>
struct TransposedScores {
    float* s_t;
    int64_t ld;
    float* block_max;
    float* block_sum;
    const float* shift;
    const int32_t* key_begin;
    const int32_t* key_end;
    int64_t j0; // key of tile row 0 of the block
    int64_t i0; // query row of column 0
    ScoreParams sp;

    template <int MR, int NV>
    FA_INLINE void finish(const Tile<MR, NV>& tile, int64_t row0, int64_t col0) {
        finish_out_of_line(tile, row0, col0);
    }
    template <int MR, int NV> // by value: a reference would keep the accumulators in memory
    FA_OUT_OF_LINE void finish_out_of_line(Tile<MR, NV> tile, int64_t row0, int64_t col0) {
        // Locals, not members: stores through float* could alias them, forcing a reload per row.
        const ScoreParams params = sp;
        const Vec scale_log2 = splat(params.scale_log2);
        float* const out = s_t + row0 * ld;
        const int64_t out_ld = ld;
        const int32_t key0 = static_cast<int32_t>(j0 + row0);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
            const int64_t col = col0 + v * kLanes;
            Vec running_max = load(block_max + col);
            Vec running_sum = {}, offset_exp = {};
            if constexpr (kExp) {
                running_sum = load(block_sum + col);
                offset_exp = load(shift + col);
            }
            IVec begin = {}, end = {};
            if constexpr (kMask) {
                begin = load(key_begin + col);
                end = load(key_end + col);
            }
            Vec offset = {};
            if constexpr (kTransform) // i + diagonal - j for j = j0 + row0 (first tile row)
                offset = __builtin_convertvector(lane_index(), Vec) +
                         splat(static_cast<float>(i0 + col + params.diagonal - j0 - row0));
#pragma GCC unroll 16
            for (int r = 0; r < MR; ++r) {
                Vec t;
                if constexpr (kTransform) {
                    Vec unused;
                    t = transformed_score_log2(tile.acc[r][v] * splat(params.scale), offset - splat(float(r)), params,
                                               &unused);
                } else {
                    t = tile.acc[r][v] * scale_log2;
                }
                if constexpr (kMask) {
                    const IVec key = splat_int(key0 + r);
                    t = select((key >= begin) & (key < end), t, splat(-kInf));
                }
                running_max = max(running_max, t);
                if constexpr (kExp) {
                    t = exp2(t - offset_exp);
                    running_sum += t;
                }
                store(out + r * out_ld + col, t);
            }
            store(block_max + col, running_max);
            if constexpr (kExp) store(block_sum + col, running_sum);
        }
    }
};

// Epilogue of O = alpha O + P V: the online-softmax rescale rides along with the accumulation.
struct RescaleAccumulate {
    float* o;
    int64_t ld;
    const float* rescale; // per tile row (query row)

    template <int MR, int NV>
    FA_INLINE void finish(const Tile<MR, NV>& tile, int64_t row0, int64_t col0) {
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            const Vec alpha = broadcast(rescale + row0 + r);
            float* row = o + (row0 + r) * ld + col0;
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) store(row + v * kLanes, load(row + v * kLanes) * alpha + tile.acc[r][v]);
        }
    }
};

// S^T for keys [j0, j0 + keys) against the packed Q^T, through the score policy. A = keys rows.
// exponentiate: also P = 2^(S - shift) and its row sums (the lazy path).
template <class KeysA>
inline void transposed_scores(const ForwardLayout& lay, const ForwardScratch& s, const KeysA& keys_a, int64_t keys,
                              int64_t rows_pad, int64_t j0, int64_t i0, const ScoreParams& sp, bool masked,
                              bool exponentiate) {
    for (int64_t c = 0; c < rows_pad; c += kLanes) {
        store(s.block_max + c, splat(-kInf));
        store(s.block_sum + c, Vec{});
    }
    with_flags(sp.transforms(), masked, [&](auto transform, auto mask) {
        auto run = [&](auto exp) {
            TransposedScores<decltype(transform)::value != 0, decltype(mask)::value != 0, decltype(exp)::value != 0>
                epilogue{s.s_t, lay.block_q, s.block_max, s.block_sum, s.shift, s.key_begin, s.key_end, j0, i0, sp};
            matmul(keys, rows_pad, lay.head_dim, keys_a, s.q_t, lay.block_q, epilogue);
        };
        if (exponentiate) run(Int<1>{});
        else run(Int<0>{});
    });
}

constexpr float kLazyRescale = 8.0f; // log2 units: P stays below 256

// The lazy path's condition, checked after its product: no real row's maximum rose too far.
inline bool within_lazy_bound(const ForwardScratch& s, int64_t rows) {
    for (int64_t r = 0; r < rows; ++r)
        if (s.block_max[r] > s.shift[r] + kLazyRescale) return false;
    return true;
}

// The lazy path's bookkeeping: fold the block's maxima and sums in, no rescale.
inline void lazy_softmax(const ForwardScratch& s, int64_t rows_pad) {
    for (int64_t c = 0; c < rows_pad; c += kLanes) {
        store(s.row_max + c, max(load(s.row_max + c), load(s.block_max + c)));
        store(s.row_sum + c, load(s.row_sum + c) + load(s.block_sum + c));
    }
}

// The classic online softmax step: fold the block's maxima into the running ones, make the new
// maximum the exponent offset, turn S^T into P^T in place and add its column sums (row sums of P)
// to the rescaled l.
inline void online_softmax(const ForwardScratch& s, int64_t keys, int64_t rows_pad, int64_t ld) {
    for (int64_t col = 0; col < rows_pad; col += kLanes) {
        const Vec m_old = load(s.row_max + col);
        const Vec m_new = max(m_old, load(s.block_max + col));
        const Vec shift = select(m_new == splat(-kInf), Vec{}, m_new); // all masked so far: no NaN
        // l and O are relative to the old offset (the lazy path may have left it below m_old);
        // nothing accumulated yet (m_old = -inf) rescales by 0.
        const Vec alpha = select(m_old == splat(-kInf), Vec{}, exp2(load(s.shift + col) - shift));
        Vec block_sum = {};
        for (int64_t j = 0; j < keys; ++j) {
            float* p = s.s_t + j * ld + col;
            const Vec prob = exp2(load(p) - shift);
            block_sum += prob;
            store(p, prob);
        }
        store(s.row_max + col, m_new);
        store(s.row_sum + col, load(s.row_sum + col) * alpha + block_sum);
        store(s.rescale + col, alpha);
        store(s.shift + col, shift);
    }
}

// attn_probs (tests only): a second sweep over every key column once lse is known, writing
// P = 2^(S - lse) (0 where masked, negated where dropout dropped it).
inline void write_probabilities(const Problem& pr, const ForwardLayout& lay, const ForwardScratch& s,
                                const Span& span, int64_t h, int64_t i0, int64_t rows, int64_t rows_pad,
                                const ScoreParams& sp, const ForwardInputs& in) {
    const int64_t seqlen_k = pr.p.seqlen_k;
    float* probs = pr.p.attn_probs + ((span.batch * pr.p.num_heads + h) * pr.p.seqlen_q + i0) * seqlen_k;
    const uint32_t threshold = dropout_keep_threshold(pr.p.dropout_p);
    for (int64_t r = 0; r < rows_pad; ++r) { // log2-unit lse; +inf makes an empty row all zeros
        const float l = s.row_sum[r];
        s.shift[r] = (r < rows && l > 0.0f) ? s.shift[r] + __builtin_log2f(l) : kInf;
    }
    for (int64_t j0 = 0; j0 < seqlen_k; j0 += lay.block_k) {
        const int64_t cols = min64(lay.block_k, seqlen_k - j0);
        const int64_t keys = max64(0, min64(cols, span.k_len - j0));
        const bool seen = keys > 0 && coverage(s.key_begin, s.key_end, rows, j0, j0 + keys) != Coverage::none;
        if (seen) {
            const Fp32Rows k = in.k.rows(pr, span, pr.kv_head(h), j0);
            transposed_scores(lay, s, RowMajor{k.data, k.ld}, keys, rows_pad, j0, i0, sp, true, false);
            for (int64_t j = 0; j < keys; ++j)
                for (int64_t c = 0; c < rows_pad; c += kLanes) {
                    float* p = s.s_t + j * lay.block_q + c;
                    store(p, exp2(load(p) - load(s.shift + c)));
                }
        }
        for (int64_t r = 0; r < rows; ++r) {
            float* out_row = probs + r * seqlen_k + j0;
            const DropoutRow gen(pr.p.rng_seed, pr.p.rng_offset, span.batch, pr.p.num_heads, h, i0 + r);
            for (int64_t j = 0; j < cols; ++j) {
                float p = (seen && j < keys) ? s.s_t[j * lay.block_q + r] : 0.0f;
                if (pr.has_dropout() && gen.bits_for_column(j0 + j) >= threshold) p = -p;
                out_row[j] = p;
            }
        }
    }
}

inline void forward_block(const Problem& pr, const ForwardLayout& lay, const ForwardInputs& in,
                          const ForwardScratch& s, const Span& span, int64_t h, int64_t q_block) {
    const int64_t i0 = q_block * lay.block_q;
    const int64_t rows = min64(lay.block_q, span.q_len - i0);
    const int64_t rows_pad = round_up(rows, kLanes);
    const int64_t d = lay.head_dim, d_pad = lay.head_dim_pad;
    const int64_t h_k = pr.kv_head(h);
    const ScoreParams sp = score_params(pr, span, h);

    compute_row_ranges(pr, span, i0, rows, rows_pad, s.key_begin, s.key_end);
    const KeySpan visit = visited_keys(s.key_begin, s.key_end, rows);

    load_rows_transposed(q_rows(pr, pr.p.q, span, i0, h), rows, rows_pad, d, s.q_t, lay.block_q);
    for (int64_t c = 0; c < rows_pad; c += kLanes) {
        store(s.row_max + c, splat(-kInf));
        store(s.row_sum + c, Vec{});
        store(s.shift + c, Vec{});
    }
    __builtin_memset(s.o, 0, rows * d_pad * sizeof(float));
    bool every_row_has_max = false; // the lazy path needs a maximum that occurred in each row
    int64_t lazy_pause = 0, lazy_backoff = 1; // blocks to skip the lazy attempt for, after a miss

    for (int64_t j0 = visit.first / lay.block_k * lay.block_k; j0 < visit.last; j0 += lay.block_k) {
        const int64_t keys = min64(lay.block_k, span.k_len - j0);
        const Coverage cover = coverage(s.key_begin, s.key_end, rows, j0, j0 + keys);
        if (cover == Coverage::none) continue;

        const Fp32Rows k = in.k.rows(pr, span, h_k, j0);
        const RowMajor keys_a{k.data, k.ld};
        const bool masked = cover != Coverage::full;
        bool lazy = false;
        if (every_row_has_max && lazy_pause == 0) {
            transposed_scores(lay, s, keys_a, keys, rows_pad, j0, i0, sp, masked, true);
            lazy = within_lazy_bound(s, rows);
            if (lazy) {
                lazy_softmax(s, rows_pad);
            } else { // wasted a product: back off (scores that keep rising, e.g. steep ALiBi)
                lazy_backoff *= 2;
                lazy_pause = lazy_backoff;
            }
        } else if (lazy_pause > 0) {
            --lazy_pause;
        }
        if (!lazy) { // classic: scores, then max, rescale and exponentials
            transposed_scores(lay, s, keys_a, keys, rows_pad, j0, i0, sp, masked, false);
            online_softmax(s, keys, rows_pad, lay.block_q);
        }
        if (pr.has_dropout()) // after the row sums: lse is of the undropped softmax; 1/(1-p) comes at the end
            drop_transposed(DropoutRows(pr, span, h), s.s_t, lay.block_q, i0, rows_pad, j0, keys);

        const Fp32Rows v = in.v.rows(pr, span, h_k, j0);
        const ColMajor probs_a{s.s_t, lay.block_q};
        if (lazy) {
            Accumulate<false> epilogue{s.o, d_pad};
            matmul(rows, d_pad, keys, probs_a, v.data, v.ld, epilogue);
        } else {
            RescaleAccumulate epilogue{s.o, d_pad, s.rescale};
            matmul(rows, d_pad, keys, probs_a, v.data, v.ld, epilogue);
        }
        if (!every_row_has_max) {
            every_row_has_max = true;
            for (int64_t r = 0; r < rows; ++r) every_row_has_max &= s.row_max[r] > -kInf;
        }
    }

    // Normalise once; a row that saw no key has l = 0: out = 0, lse = -inf.
    const float keep_scale = pr.has_dropout() ? 1.0f / (1.0f - pr.p.dropout_p) : 1.0f;
    const OutRows out = q_out_rows(pr, pr.p.out, span, i0, h);
    for (int64_t r = 0; r < rows; ++r) {
        const float l = s.row_sum[r];
        store_row(out, r, s.o + r * d_pad, d, l > 0.0f ? keep_scale / l : 0.0f);
        if (pr.p.softmax_lse)
            pr.p.softmax_lse[pr.lse_index(span, i0 + r, h)] =
                l > 0.0f ? (s.shift[r] + __builtin_log2f(l)) * kLn2 : -kInf;
    }
    if (pr.p.attn_probs) write_probabilities(pr, lay, s, span, h, i0, rows, rows_pad, sp, in);
}
