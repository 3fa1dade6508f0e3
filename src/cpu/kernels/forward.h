// The FA2 forward on the CPU. A tile = query rows of one (sequence, head set): one head, or with
// GQA packing every head that shares a KV head (TileRows). A task = one tile (decode: the tiles of
// a few KV heads) and, with split-KV, one share of the keys. A tile walks the key/value blocks its
// rows may see, keeping per row a running maximum m and sum l and an unnormalised output O in
// fp32 scratch, and divides once at the end:
//
//   S^T = K_blk Q_blk^T            (tile products; the score policy runs in their epilogue)
//   m'  = max(m, rowmax S)   alpha = e^(m - m')   P = e^(S - m')   l = alpha l + rowsum P
//   O   = alpha O + dropout(P) V   (alpha folded into the product's epilogue)
//   out = O / l                    lse = m + log l
//
// with e^x as exp2(x * log2 e) after the subtraction (scores.h says why).
//
// A learnable sink is a logit every row's softmax has before any key, with no value: it is the
// state (m, l, O) = (sink, 1, 0) a row starts from instead of (-inf, 0, 0), and nothing else
// changes. With split-KV it is one more partial in the merge instead (lse = sink, no output), so
// that it counts once. O and V are head_dim_v wide, Q and K head_dim.
//
// S is kept transposed (keys down, query rows across the vector lanes) so that the row max, the
// exponentials and the row sums are plain vertical vector operations, with no horizontal reduction:
// the per-row statistics of kLanes rows live in one vector.
//
// Lazy rescaling: once every row has a maximum, a block whose scores stay below it + kLazyRescale
// keeps the old maximum as the exponent offset. Its exponentials and row sums then happen right in
// the S^T product's epilogue, and O accumulates without rescaling; P values up to e^kLazyRescale
// (256) are harmless in fp32. A block that does raise a maximum that far is redone the
// classic way above. After the first block this is almost every block; when it is not (scores
// that keep rising along the keys), the lazy attempts back off exponentially.
//
// Split-KV: when the tiles alone are too few tasks (decode: one tile per KV head), a tile's keys
// are divided among `splits` tasks; each leaves its normalised output and lse, and a
// second pass merges them by their lse, fa_combine's rule (merge_splits).

struct ForwardLayout {
    int64_t block_q, block_k, head_dim, head_dim_pad;
    int64_t head_dim_v, head_dim_v_pad; // of V and O
    int64_t pack;   // heads per tile row group: 1, or the GQA group when seqlen_q is small
    int64_t splits; // key shares per tile (split-KV); 1 = off
    int64_t tiles_per_task; // tiles (head sets) one task walks together: > 1 only for one tile per KV head
    bool one_tile_per_kv_head; // every (sequence, KV head) is one tile: its K/V blocks are read by one task
};

// K and V as fp32 rows: the caller's memory, or a copy packed once before the tasks run.
struct ForwardInputs {
    RowsSource k, v;
};

struct ForwardScratch {
    float* q_t;       // head_dim x block_q: Q block transposed (B operand of S^T)
    float* k_block;   // block_k x head_dim_pad: a K block converted to fp32 (when not read in place)
    float* v_block;   // block_k x head_dim_v_pad: ... a V block
    float* s_t;       // block_k x block_q: scores, then probabilities, transposed
    float* o;         // block_q x head_dim_v_pad: unnormalised output
    float* row_max;   // per query row: the running maximum m
    float* row_sum;   // the running l, relative to `shift`
    float* shift;     // the exponent offset in use: P = e^(S - shift); a past maximum (0 while none)
    float* block_max; // max of the current block's scores per row
    float* block_sum; // row sums of the current block's P (lazy path)
    float* rescale;   // alpha per row for the current block (classic path)
    int32_t* key_begin;
    int32_t* key_end;
    float* position;     // per tile row: its key position i + diagonal (ALiBi's distance)
    float* slope;        // per tile row: its head's ALiBi slope
    uint32_t* drop_row;  // per tile row: dropout's row counter i ...
    uint32_t* drop_head; // ... and head counter b * num_heads + h
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

// A task's scratch: the per-block pieces (k_block, v_block, s_t, block_max, block_sum, rescale) once,
// then the per-tile pieces (the rest) once per tile of the task, tile_bytes apart.
struct TaskScratch {
    ForwardScratch first; // tile 0's view
    size_t tile_bytes;
    // The scratch as tile t sees it: the shared per-block pieces and its own per-tile pieces.
    ForwardScratch tile(int64_t t) const {
        ForwardScratch s = first;
        const size_t offset = size_t(t) * tile_bytes;
        s.q_t = moved(s.q_t, offset), s.o = moved(s.o, offset), s.row_max = moved(s.row_max, offset);
        s.row_sum = moved(s.row_sum, offset), s.shift = moved(s.shift, offset);
        s.key_begin = moved(s.key_begin, offset), s.key_end = moved(s.key_end, offset);
        s.position = moved(s.position, offset), s.slope = moved(s.slope, offset);
        s.drop_row = moved(s.drop_row, offset), s.drop_head = moved(s.drop_head, offset);
        return s;
    }
    template <class T>
    static T* moved(T* p, size_t offset) {
        return reinterpret_cast<T*>(reinterpret_cast<char*>(p) + offset);
    }
};

inline TaskScratch carve_forward_scratch(const ForwardLayout& lay, char* slab, size_t* bytes) {
    SlabCarver c{slab};
    ForwardScratch s;
    s.k_block = c.take<float>(lay.block_k * lay.head_dim_pad);
    s.v_block = c.take<float>(lay.block_k * lay.head_dim_v_pad);
    s.s_t = c.take<float>(lay.block_k * lay.block_q);
    s.block_max = c.take<float>(lay.block_q);
    s.block_sum = c.take<float>(lay.block_q);
    s.rescale = c.take<float>(lay.block_q);
    const size_t shared_bytes = c.used;
    s.q_t = c.take<float>(lay.head_dim * lay.block_q);
    s.o = c.take<float>(lay.block_q * lay.head_dim_v_pad);
    s.row_max = c.take<float>(lay.block_q);
    s.row_sum = c.take<float>(lay.block_q);
    s.shift = c.take<float>(lay.block_q);
    s.key_begin = c.take<int32_t>(lay.block_q);
    s.key_end = c.take<int32_t>(lay.block_q);
    s.position = c.take<float>(lay.block_q);
    s.slope = c.take<float>(lay.block_q);
    s.drop_row = c.take<uint32_t>(lay.block_q);
    s.drop_head = c.take<uint32_t>(lay.block_q);
    const size_t tile_bytes = c.used - shared_bytes;
    if (bytes) *bytes = shared_bytes + size_t(lay.tiles_per_task) * tile_bytes;
    return {s, tile_bytes};
}

// Epilogue of S^T = K Q^T: score policy, then the block's running row max, and with kExp the
// probabilities e^(t - shift) and their row sums too (lazy path). Tile rows are keys, tile columns
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
    const float* position; // per column (query row): i + diagonal
    const float* slope;    // per column: ALiBi slope
    int64_t j0; // key of tile row 0 of the block
    ScoreParams sp;

    template <int MR, int NV>
    FA_INLINE void finish(const Tile<MR, NV>& tile, int64_t row0, int64_t col0) {
        finish_out_of_line(tile, row0, col0);
    }
    template <int MR, int NV> // by value: a reference would keep the accumulators in memory
    FA_OUT_OF_LINE void finish_out_of_line(Tile<MR, NV> tile, int64_t row0, int64_t col0) {
        // Locals, not members: stores through float* could alias them, forcing a reload per row.
        const ScoreParams params = sp;
        const Vec scale = splat(params.scale), log2e = splat(kLog2e);
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
            Vec offset = {}, slopes = {};
            if constexpr (kTransform) { // i + diagonal - j for j = j0 + row0 (first tile row); exact integers
                offset = load(position + col) - splat(static_cast<float>(j0 + row0));
                slopes = load(slope + col);
            }
#pragma GCC unroll 16
            for (int r = 0; r < MR; ++r) {
                Vec t;
                if constexpr (kTransform) {
                    Vec unused;
                    t = transformed_score(tile.acc[r][v] * scale, offset - splat(float(r)), slopes, params, &unused);
                } else {
                    t = tile.acc[r][v] * scale;
                }
                if constexpr (kMask) {
                    const IVec key = splat_int(key0 + r);
                    t = select((key >= begin) & (key < end), t, splat(-kInf));
                }
                running_max = max(running_max, t);
                if constexpr (kExp) {
                    t = exp2((t - offset_exp) * log2e);
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
// exponentiate: also P = e^(S - shift) and its row sums (the lazy path).
template <class KeysA>
inline void transposed_scores(const ForwardLayout& lay, const ForwardScratch& s, const KeysA& keys_a, int64_t keys,
                              int64_t rows_pad, int64_t j0, const ScoreParams& sp, bool masked, bool exponentiate) {
    for (int64_t c = 0; c < rows_pad; c += kLanes) {
        store(s.block_max + c, splat(-kInf));
        store(s.block_sum + c, Vec{});
    }
    with_flags(sp.transforms(), masked, [&](auto transform, auto mask) {
        auto run = [&](auto exp) {
            TransposedScores<decltype(transform)::value != 0, decltype(mask)::value != 0, decltype(exp)::value != 0>
                epilogue{s.s_t,       lay.block_q, s.block_max, s.block_sum, s.shift, s.key_begin,
                         s.key_end, s.position,  s.slope,     j0,          sp};
            matmul(keys, rows_pad, lay.head_dim, keys_a, s.q_t, lay.block_q, epilogue);
        };
        if (exponentiate) run(Int<1>{});
        else run(Int<0>{});
    });
}

constexpr float kLazyRescale = 8.0f * kLn2; // P stays below 2^8

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
        const Vec alpha = select(m_old == splat(-kInf), Vec{}, exp2((load(s.shift + col) - shift) * splat(kLog2e)));
        Vec block_sum = {};
        for (int64_t j = 0; j < keys; ++j) {
            float* p = s.s_t + j * ld + col;
            const Vec prob = exp2((load(p) - shift) * splat(kLog2e));
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
// P = e^(S - lse) (0 where masked, negated where dropout dropped it).
inline void write_probabilities(const Problem& pr, const ForwardLayout& lay, const ForwardScratch& s,
                                const Span& span, const TileRows& tile, const ScoreParams& sp,
                                const ForwardInputs& in) {
    const int64_t seqlen_k = pr.p.seqlen_k, rows = tile.rows;
    const int64_t h_k = pr.kv_head(tile.h0);
    const uint32_t threshold = dropout_keep_threshold(pr.p.dropout_p);
    for (int64_t r = 0; r < tile.rows_pad; ++r) { // lse; +inf makes an empty row all zeros
        const float l = s.row_sum[r];
        s.shift[r] = (r < rows && l > 0.0f) ? s.shift[r] + __builtin_logf(l) : kInf;
    }
    for (int64_t j0 = 0; j0 < seqlen_k; j0 += lay.block_k) {
        const int64_t cols = min64(lay.block_k, seqlen_k - j0);
        const int64_t keys = max64(0, min64(cols, span.k_len - j0));
        const bool seen = keys > 0 && coverage(s.key_begin, s.key_end, rows, j0, j0 + keys) != Coverage::none;
        if (seen) {
            const Fp32Rows k = in.k.block(pr, span, h_k, j0, keys, s.k_block);
            transposed_scores(lay, s, RowMajor{k.data, k.ld}, keys, tile.rows_pad, j0, sp, true, false);
            for (int64_t j = 0; j < keys; ++j)
                for (int64_t c = 0; c < tile.rows_pad; c += kLanes) {
                    float* p = s.s_t + j * lay.block_q + c;
                    store(p, exp2((load(p) - load(s.shift + c)) * splat(kLog2e)));
                }
        }
        for (int64_t r = 0; r < rows; ++r) {
            const int64_t i = tile.row(r), h = tile.head(r);
            float* out_row = pr.p.attn_probs + ((span.batch * pr.p.num_heads + h) * pr.p.seqlen_q + i) * seqlen_k + j0;
            const DropoutRow gen(pr.dropout_seed(), pr.dropout_offset(), span.batch, pr.p.num_heads, h, i);
            for (int64_t j = 0; j < cols; ++j) {
                float p = (seen && j < keys) ? s.s_t[j * lay.block_q + r] : 0.0f;
                if (pr.has_dropout() && gen.bits_for_column(j0 + j) >= threshold) p = -p;
                out_row[j] = p;
            }
        }
    }
}

// Split-KV partial results: split `split` of the tile holding (global query row g, head h) leaves its
// normalised output (head_dim_v_pad floats) and its lse (-inf: it saw no key) here.
struct SplitPartials {
    float* o;
    float* lse;
    int64_t q_rows, heads, d_pad;
    FA_INLINE int64_t index(int64_t split, int64_t g, int64_t h) const { return (split * q_rows + g) * heads + h; }
};

// Query row i of a sequence as a row of the whole (packed or padded) q tensor.
FA_INLINE int64_t global_q_row(const Problem& pr, const Span& span, int64_t i) {
    return pr.varlen ? span.q_row0 + i : span.batch * pr.p.seqlen_q + i;
}

// The per-row facts the score policy and dropout need, for a tile that may mix heads: key ranges,
// ALiBi positions and slopes, Philox counters. Returns the tile's score parameters.
inline ScoreParams prepare_tile_rows(const Problem& pr, const ForwardScratch& s, const Span& span,
                                     const TileRows& tile) {
    ScoreParams sp = score_params(pr, span, tile.h0);
    compute_row_ranges(pr, span, tile, s.key_begin, s.key_end);
    sp.alibi = false;
    for (int64_t r = 0; r < tile.rows_pad; ++r) {
        const bool real = r < tile.rows;
        const int64_t i = real ? tile.row(r) : 0, h = real ? tile.head(r) : tile.h0;
        s.position[r] = static_cast<float>(i + sp.diagonal);
        s.slope[r] = real ? pr.alibi_slope(span.batch, h) : 0.0f;
        sp.alibi |= s.slope[r] != 0.0f;
        s.drop_row[r] = static_cast<uint32_t>(i);
        s.drop_head[r] = static_cast<uint32_t>(span.batch * pr.p.num_heads + h);
    }
    return sp;
}

// The keys split `split` of `splits` covers: whole key blocks of the rows' visited interval, as
// evenly divided as blocks allow (a split may get none).
inline KeySpan split_keys(KeySpan visit, int64_t block_k, int64_t split, int64_t splits) {
    if (splits == 1 || visit.first >= visit.last) return visit;
    const int64_t first_block = visit.first / block_k, blocks = ceil_div(visit.last, block_k) - first_block;
    const int64_t begin = first_block + blocks * split / splits, end = first_block + blocks * (split + 1) / splits;
    if (begin >= end) return {0, 0};
    return {max64(visit.first, begin * block_k), min64(visit.last, end * block_k)};
}

// The state of one tile between key blocks; its arrays are the tile's part of the scratch.
struct TileState {
    TileRows tile;
    ScoreParams sp;
    bool every_row_has_max; // the lazy path needs a maximum that occurred in each row
    int64_t lazy_pause, lazy_backoff; // blocks to skip the lazy attempt for, after a miss
};

inline TileState start_tile(const Problem& pr, const ForwardLayout& lay, const ForwardScratch& s, const Span& span,
                            const TileRows& tile) {
    const TileState st{tile, prepare_tile_rows(pr, s, span, tile), false, 0, 1};
    load_queries_transposed(pr, pr.p.q, span, tile, s.q_t, lay.block_q);
    for (int64_t c = 0; c < tile.rows_pad; c += kLanes) {
        store(s.row_max + c, splat(-kInf));
        store(s.row_sum + c, Vec{});
        store(s.shift + c, Vec{});
    }
    if (pr.has_sink() && lay.splits == 1) // the sink as the state before any key; split-KV merges it instead
        for (int64_t r = 0; r < tile.rows; ++r) {
            s.row_max[r] = pr.sink(tile.head(r));
            s.shift[r] = pr.sink(tile.head(r));
            s.row_sum[r] = 1.0f;
        }
    __builtin_memset(s.o, 0, tile.rows * lay.head_dim_v_pad * sizeof(float));
    return st;
}

// The tile's rows against keys [j0, j0 + keys), which they see as `cover` says (not none).
inline void tile_key_block(const Problem& pr, const ForwardLayout& lay, const ForwardScratch& s, const Span& span,
                           TileState& st, int64_t j0, int64_t keys, Coverage cover, const Fp32Rows& k,
                           const Fp32Rows& v) {
    const int64_t rows = st.tile.rows, rows_pad = st.tile.rows_pad, d_pad = lay.head_dim_v_pad;
    const RowMajor keys_a{k.data, k.ld};
    const bool masked = cover != Coverage::full;
    bool lazy = false;
    if (st.every_row_has_max && st.lazy_pause == 0) {
        transposed_scores(lay, s, keys_a, keys, rows_pad, j0, st.sp, masked, true);
        lazy = within_lazy_bound(s, rows);
        if (lazy) {
            lazy_softmax(s, rows_pad);
        } else { // wasted a product: back off (scores that keep rising, e.g. steep ALiBi)
            st.lazy_backoff *= 2;
            st.lazy_pause = st.lazy_backoff;
        }
    } else if (st.lazy_pause > 0) {
        --st.lazy_pause;
    }
    if (!lazy) { // classic: scores, then max, rescale and exponentials
        transposed_scores(lay, s, keys_a, keys, rows_pad, j0, st.sp, masked, false);
        online_softmax(s, keys, rows_pad, lay.block_q);
    }
    if (pr.has_dropout()) // after the row sums: lse is of the undropped softmax; 1/(1-p) comes at the end
        drop_transposed(DropoutRows(pr, span, st.tile.h0), s.drop_row, s.drop_head, s.s_t, lay.block_q, rows_pad, j0,
                        keys);

    const ColMajor probs_a{s.s_t, lay.block_q};
    if (lazy) {
        Accumulate<false> epilogue{s.o, d_pad};
        matmul(rows, d_pad, keys, probs_a, v.data, v.ld, epilogue);
    } else {
        RescaleAccumulate epilogue{s.o, d_pad, s.rescale};
        matmul(rows, d_pad, keys, probs_a, v.data, v.ld, epilogue);
    }
    if (!st.every_row_has_max) {
        st.every_row_has_max = true;
        for (int64_t r = 0; r < rows; ++r) st.every_row_has_max &= s.row_max[r] > -kInf;
    }
}

// Normalise once; a row that saw no key has l = 0: out = 0, lse = -inf (with a sink: l = 1 from
// the sink alone, out = 0, lse = the sink). The result goes to out and softmax_lse, or with split-KV
// (partials non-null) to split `split`'s partial buffers.
inline void finish_tile(const Problem& pr, const ForwardLayout& lay, const ForwardInputs& in, const ForwardScratch& s,
                        const Span& span, const TileState& st, int64_t split, const SplitPartials* partials) {
    const TileRows& tile = st.tile;
    const int64_t d = lay.head_dim_v, d_pad = lay.head_dim_v_pad;
    const float keep_scale = pr.has_dropout() ? 1.0f / (1.0f - pr.p.dropout_p) : 1.0f;
    for (int64_t r = 0; r < tile.rows; ++r) {
        const int64_t i = tile.row(r), h = tile.head(r);
        const float l = s.row_sum[r];
        const float lse = l > 0.0f ? s.shift[r] + __builtin_logf(l) : -kInf;
        if (partials) {
            const int64_t at = partials->index(split, global_q_row(pr, span, i), h);
            store_row(OutRows{partials->o, FA_FLOAT32, at * d_pad, 0}, 0, s.o + r * d_pad, d_pad,
                      l > 0.0f ? keep_scale / l : 0.0f);
            partials->lse[at] = lse;
        } else {
            store_row(q_out_rows(pr, pr.p.out, span, i, h), 0, s.o + r * d_pad, d, l > 0.0f ? keep_scale / l : 0.0f);
            if (pr.p.softmax_lse) pr.p.softmax_lse[pr.lse_index(span, i, h)] = lse;
        }
    }
    if (pr.p.attn_probs) write_probabilities(pr, lay, s, span, tile, st.sp, in);
}

// One task: `tiles` tiles -- head sets first.h0, first.h0 + pack, ... over the same query rows --
// against share `split` of their keys. The tiles walk the key blocks together, each block for every
// tile before the next block: a (batch, seqlen, heads, dim) cache is then read row by row, all of a
// row's heads within a short time, instead of one head's strided column at a time. Tiles of one
// task see the same keys (same rows, same sequence), so the key walk is computed once.
inline void forward_task(const Problem& pr, const ForwardLayout& lay, const ForwardInputs& in, const TaskScratch& ts,
                         TileState* states, const Span& span, const TileRows& first, int64_t tiles, int64_t split,
                         const SplitPartials* partials) {
    for (int64_t t = 0; t < tiles; ++t) {
        TileRows tile = first;
        tile.h0 = first.h0 + t * first.pack;
        states[t] = start_tile(pr, lay, ts.tile(t), span, tile);
    }
    const ForwardScratch s0 = ts.tile(0);
    const int64_t rows = first.rows;
    const KeySpan visit = split_keys(visited_keys(s0.key_begin, s0.key_end, rows), lay.block_k, split, lay.splits);

    for (int64_t j0 = visit.first / lay.block_k * lay.block_k; j0 < visit.last; j0 += lay.block_k) {
        const int64_t keys = min64(lay.block_k, span.k_len - j0);
        const Coverage cover = coverage(s0.key_begin, s0.key_end, rows, j0, j0 + keys);
        if (cover == Coverage::none) continue;
        for (int64_t t = 0; t < tiles; ++t) {
            const ForwardScratch s = ts.tile(t);
            const int64_t h_k = pr.kv_head(states[t].tile.h0);
            // Prefetched while this block converts: the next tile's rows of this block, else the
            // first tile's rows of the next block (a guess when masks skip it; rarely wrong).
            RowsAhead ahead{t + 1 < tiles ? pr.kv_head(states[t + 1].tile.h0) : 0, j0, keys};
            if (t + 1 == tiles) {
                const int64_t next_j0 = j0 + lay.block_k;
                ahead = {pr.kv_head(first.h0), next_j0, max64(0, min64(lay.block_k, visit.last - next_j0))};
            }
            const Fp32Rows k = in.k.block(pr, span, h_k, j0, keys, s.k_block, ahead);
            const Fp32Rows v = in.v.block(pr, span, h_k, j0, keys, s.v_block, ahead);
            tile_key_block(pr, lay, s, span, states[t], j0, keys, cover, k, v);
        }
    }
    for (int64_t t = 0; t < tiles; ++t) finish_tile(pr, lay, in, ts.tile(t), span, states[t], split, partials);
}

// Split-KV's second pass, for one tile: with M the largest lse_s of a row,
//     lse = M + log sum_s e^(lse_s - M),    out = sum_s e^(lse_s - lse) O_s
// over the splits that saw a key, in split order (fa_combine's merge). A sink is one
// more such term, with lse_s = the sink and no output. A row no split saw: out 0, lse -inf (the
// sink's, with one). acc: head_dim_v_pad floats of scratch.
inline void merge_splits(const Problem& pr, const ForwardLayout& lay, const SplitPartials& parts, const Span& span,
                         const TileRows& tile, float* acc) {
    const int64_t d_pad = lay.head_dim_v_pad;
    for (int64_t r = 0; r < tile.rows; ++r) {
        const int64_t i = tile.row(r), h = tile.head(r), g = global_q_row(pr, span, i);
        const float sink = pr.sink(h); // -inf without sinks
        float m = sink;
        for (int64_t part = 0; part < lay.splits; ++part) {
            const float l = parts.lse[parts.index(part, g, h)];
            if (l > m) m = l;
        }
        float sum = 0.0f;
        for (int64_t part = 0; part < lay.splits && m > -kInf; ++part) {
            const float l = parts.lse[parts.index(part, g, h)];
            if (l > -kInf) sum += __builtin_exp2f((l - m) * kLog2e);
        }
        if (sink > -kInf) sum += __builtin_exp2f((sink - m) * kLog2e);
        const float lse = m > -kInf ? m + __builtin_logf(sum) : -kInf;
        for (int64_t c = 0; c < d_pad; c += kLanes) store(acc + c, Vec{});
        for (int64_t part = 0; part < lay.splits && m > -kInf; ++part) {
            const int64_t at = parts.index(part, g, h);
            if (!(parts.lse[at] > -kInf)) continue; // saw no key: its output was never written
            const Vec weight = splat(__builtin_exp2f((parts.lse[at] - lse) * kLog2e));
            const float* o = parts.o + at * d_pad;
            for (int64_t c = 0; c < d_pad; c += kLanes) store(acc + c, load(acc + c) + weight * load(o + c));
        }
        store_row(q_out_rows(pr, pr.p.out, span, i, h), 0, acc, lay.head_dim_v, 1.0f);
        if (pr.p.softmax_lse) pr.p.softmax_lse[pr.lse_index(span, i, h)] = lse;
    }
}
