// Moving blocks of rows between the caller's tensors (any dtype, any row stride) and the fp32
// scratch the tile products read. Conversions happen here, once per block, never in a product.

FA_INLINE int64_t round_up(int64_t x, int64_t multiple) { return (x + multiple - 1) / multiple * multiple; }
FA_INLINE int64_t ceil_div(int64_t x, int64_t y) { return (x + y - 1) / y; }
FA_INLINE int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
FA_INLINE int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

// `rows` consecutive rows of one head of a q/k/v-shaped tensor (or its gradient).
struct RowsView {
    const void* data;
    fa_dtype dtype;
    int64_t first;      // element offset of row 0
    int64_t row_stride; // elements between rows
};

// The rows of head h (of the q side or the k side) of `t`, from row `row` of span `s` on.
FA_INLINE RowsView q_rows(const Problem& pr, const fa_tensor& t, const Span& s, int64_t row, int64_t h) {
    return {t.data, pr.p.dtype, pr.q_offset(t, s, row, h), t.row_stride};
}
FA_INLINE RowsView k_rows(const Problem& pr, const fa_tensor& t, const Span& s, int64_t row, int64_t h) {
    return {t.data, pr.p.dtype, pr.k_offset(t, s, row, h), t.row_stride};
}

// The query rows of one forward task. With GQA packing (pack = the heads that share a KV head),
// packed row p of a head set is query row p / pack of head h0 + p % pack: the group's heads sit side
// by side in the tile (a query row's heads next to each other, so a mask's edge stays narrow), and
// one pass over a K/V block serves them all. pack = 1: consecutive rows of head h0, the plain tile.
struct TileRows {
    int64_t p0;       // first packed row of the tile
    int64_t rows;     // real rows of the tile
    int64_t rows_pad; // rows rounded up to whole vectors: the tile's columns in S^T
    int64_t pack;     // heads per packed row group
    int64_t h0;       // first head of the head set
    FA_INLINE int64_t row(int64_t r) const { return (p0 + r) / pack; }
    FA_INLINE int64_t head(int64_t r) const { return h0 + (p0 + r) % pack; }
};

// Can the products read these rows in place? fp32 rows whose length fills whole vectors (B operands
// read ceil(d / kLanes) full vectors per row) and that follow each other in memory: rows a large
// power-of-two stride apart all fall into the same few cache sets and evict each other.
FA_INLINE bool readable_in_place(const RowsView& v, int64_t head_dim) {
    return v.dtype == FA_FLOAT32 && head_dim % kLanes == 0 && v.row_stride == head_dim;
}
FA_INLINE const float* in_place(const RowsView& v) { return static_cast<const float*>(v.data) + v.first; }
FA_INLINE RowsView advanced(RowsView v, int64_t rows) {
    v.first += rows * v.row_stride;
    return v;
}

// dst[0:n] = row as floats.
inline void convert_row(const RowsView& v, int64_t row, int64_t n, float* dst) {
    const int64_t offset = v.first + row * v.row_stride;
    int64_t i = 0;
    if (v.dtype == FA_FLOAT32) {
        __builtin_memcpy(dst, static_cast<const float*>(v.data) + offset, n * sizeof(float));
        return;
    }
    const uint16_t* src = static_cast<const uint16_t*>(v.data) + offset;
    if (v.dtype == FA_BFLOAT16) {
        for (; i + kLanes <= n; i += kLanes) {
            HalfBits h;
            __builtin_memcpy(&h, src + i, sizeof h);
            store(dst + i, bf16_to_float(h));
        }
        for (; i < n; ++i) dst[i] = flashattn::bf16_to_float(src[i]);
    } else {
        for (; i + kLanes <= n; i += kLanes) {
            HalfBits h;
            __builtin_memcpy(&h, src + i, sizeof h);
            store(dst + i, fp16_to_float(h));
        }
        for (; i < n; ++i) dst[i] = flashattn::fp16_to_float(src[i]);
    }
}

// dst[r * ld + c] = row r, column c, for r < rows, c < n; columns [n, n_pad) are zeroed.
inline void load_rows(const RowsView& v, int64_t rows, int64_t n, int64_t n_pad, float* dst, int64_t ld) {
    for (int64_t r = 0; r < rows; ++r) {
        convert_row(v, r, n, dst + r * ld);
        for (int64_t c = n; c < n_pad; ++c) dst[r * ld + c] = 0.0f;
    }
}

// The tile's queries transposed: dst[c * ld + r] = feature c of packed row r of `tile`; columns
// [rows, rows_pad) are zeroed so the padding columns of the transposed block are 0.
inline void load_queries_transposed(const Problem& pr, const fa_tensor& q, const Span& span, const TileRows& tile,
                                    float* dst, int64_t ld) {
    const int64_t n = pr.head_dim();
    float row_buffer[256];
    for (int64_t r = 0; r < tile.rows; ++r) {
        convert_row(q_rows(pr, q, span, tile.row(r), tile.head(r)), 0, n, row_buffer);
        for (int64_t c = 0; c < n; ++c) dst[c * ld + r] = row_buffer[c];
    }
    for (int64_t c = 0; c < n; ++c)
        for (int64_t r = tile.rows; r < tile.rows_pad; ++r) dst[c * ld + r] = 0.0f;
}

// Transposed: dst[c * ld + r] = row r, column c, for r < rows, c < n; rows [rows, rows_pad) are
// zeroed so the padding columns of the transposed block are 0.
inline void load_rows_transposed(const RowsView& v, int64_t rows, int64_t rows_pad, int64_t n, float* dst,
                                 int64_t ld) {
    float row_buffer[256];
    for (int64_t r = 0; r < rows; ++r) {
        convert_row(v, r, n, row_buffer);
        for (int64_t c = 0; c < n; ++c) dst[c * ld + r] = row_buffer[c];
    }
    for (int64_t c = 0; c < n; ++c)
        for (int64_t r = rows; r < rows_pad; ++r) dst[c * ld + r] = 0.0f;
}

// Rows of a KV head to prefetch: the block a task will convert next.
struct RowsAhead {
    int64_t h_k = 0, row0 = 0, rows = 0;
};

// Keys (or values) [row0, row0 + rows) of (sequence s, KV head h_k) of the k-shaped tensor t (n
// columns: head_dim, or head_dim_v for values) as fp32 rows d_pad floats apart, padding zeroed;
// paged rows one page-contiguous run at a time.
//
// It also asks for the cache lines of the rows `ahead` names, one row per row converted: the next
// block, which then arrives while this one is computed. A head's rows sit num_heads_k * head_dim
// elements apart in a (batch, seqlen, heads, dim) cache, a stride the hardware prefetchers do not
// follow across pages: without this, decode waits on memory latency, not bandwidth.
inline void load_key_rows(const Problem& pr, const fa_tensor& t, const Span& s, int64_t h_k, int64_t row0,
                          int64_t rows, int64_t n, float* dst, int64_t d_pad, const RowsAhead& ahead = {}) {
    const int64_t element_bytes = dtype_size(pr.p.dtype);
    for (int64_t done = 0; done < rows;) {
        const int64_t run = min64(rows - done, pr.k_rows_in_step(s, row0 + done));
        const RowsView view = k_rows(pr, t, s, row0 + done, h_k);
        for (int64_t r = 0; r < run; ++r) {
            const int64_t at = done + r;
            if (at < ahead.rows) {
                const char* next = static_cast<const char*>(t.data) +
                                   pr.k_offset(t, s, ahead.row0 + at, ahead.h_k) * element_bytes;
                for (int64_t byte = 0; byte < n * element_bytes; byte += 64) __builtin_prefetch(next + byte, 0, 3);
            }
            float* row = dst + at * d_pad;
            convert_row(view, r, n, row);
            for (int64_t c = n; c < d_pad; ++c) row[c] = 0.0f;
        }
        done += run;
    }
}

// fp32 rows the products read in place: row r at data + r * ld, head_dim_pad floats readable.
struct Fp32Rows {
    const float* data;
    int64_t ld;
    FA_INLINE const float* row(int64_t r) const { return data + r * ld; }
};

// One q-shaped or k-shaped input of `width` columns (head_dim; v and dout: head_dim_v) as Fp32Rows
// per (sequence, head): the caller's memory when it can be read in place, else an fp32 copy with
// contiguous, zero-padded rows made once per call
// (pack_rows): head h, global row g at packed + (h * rows_total + g) * d_pad. A source made with
// pack_up_front = false and not readable in place has no copy (packed == nullptr): its rows are
// converted block by block into the caller's scratch (block()), for inputs each of whose blocks is
// read by one task only (decode: a KV block serves its whole GQA group in one task).
struct RowsSource {
    const fa_tensor* tensor;
    bool q_side;
    bool in_place;
    float* packed;
    int64_t rows_total, width, d_pad;

    FA_INLINE int64_t global_row(const Problem& pr, const Span& s, int64_t row) const {
        if (q_side) return pr.varlen ? s.q_row0 + row : s.batch * pr.p.seqlen_q + row;
        // Paged rows have no place of their own in a packed tensor: seqlen_k rows per sequence.
        return pr.varlen && !pr.kv.paged() ? s.k_row0 + row : s.batch * pr.p.seqlen_k + row;
    }
    FA_INLINE RowsView view(const Problem& pr, const Span& s, int64_t h, int64_t row0) const {
        return q_side ? q_rows(pr, *tensor, s, row0, h) : k_rows(pr, *tensor, s, row0, h);
    }
    FA_INLINE Fp32Rows rows(const Problem& pr, const Span& s, int64_t h, int64_t row0) const {
        if (in_place) {
            const RowsView v = view(pr, s, h, row0);
            return {static_cast<const float*>(v.data) + v.first, v.row_stride};
        }
        return {packed + (h * rows_total + global_row(pr, s, row0)) * d_pad, d_pad};
    }
    // Rows [row0, row0 + count) of a k-shaped source: in place, from the copy, or converted now into
    // `scratch` (count x d_pad floats) while the rows `ahead` names are prefetched.
    FA_INLINE Fp32Rows block(const Problem& pr, const Span& s, int64_t h, int64_t row0, int64_t count,
                             float* scratch, const RowsAhead& ahead = {}) const {
        if (in_place || packed) return rows(pr, s, h, row0);
        load_key_rows(pr, *tensor, s, h, row0, count, width, scratch, d_pad, ahead);
        return {scratch, d_pad};
    }
};

inline RowsSource rows_source(const Problem& pr, const fa_tensor& t, bool q_side, int64_t width, Executor& ex,
                              bool pack_up_front = true) {
    RowsSource src{&t, q_side, false, nullptr, 0, width, round_up(width, kLanes)};
    const Span any{0, 0, 0, 0, 0};
    // Paged keys are gathered into the packed copy: a key block may span several pages.
    const bool paged = !q_side && pr.kv.paged();
    src.in_place = !paged && readable_in_place(q_side ? q_rows(pr, t, any, 0, 0) : k_rows(pr, t, any, 0, 0), width);
    if (!src.in_place && pack_up_front) {
        const int64_t heads = q_side ? pr.p.num_heads : pr.p.num_heads_k;
        src.rows_total = q_side ? (pr.varlen ? pr.total_q : int64_t(pr.p.batch) * pr.p.seqlen_q)
                                : (pr.varlen && !paged ? pr.p.total_k : int64_t(pr.p.batch) * pr.p.seqlen_k);
        src.packed = static_cast<float*>(ex.allocate(size_t(heads) * src.rows_total * src.d_pad * sizeof(float)));
    }
    return src;
}

// Converts rows [row0, row0 + rows) of (sequence s, head h) into the packed copy (if there is one).
// Paged keys are copied one page-contiguous run at a time.
inline void pack_rows(const Problem& pr, const RowsSource& src, const Span& s, int64_t h, int64_t row0, int64_t rows) {
    if (!src.packed || rows <= 0) return;
    float* dst = src.packed + (h * src.rows_total + src.global_row(pr, s, row0)) * src.d_pad;
    if (src.q_side) load_rows(src.view(pr, s, h, row0), rows, src.width, src.d_pad, dst, src.d_pad);
    else load_key_rows(pr, *src.tensor, s, h, row0, rows, src.width, dst, src.d_pad);
}

// Destination rows in the caller's tensor for outputs.
struct OutRows {
    void* data;
    fa_dtype dtype;
    int64_t first;
    int64_t row_stride;
};

// row = src[0:n] * scale, converted to the tensor's dtype.
inline void store_row(const OutRows& o, int64_t row, const float* src, int64_t n, float scale) {
    const int64_t offset = o.first + row * o.row_stride;
    int64_t i = 0;
    const Vec scale_v = splat(scale);
    if (o.dtype == FA_FLOAT32) {
        float* dst = static_cast<float*>(o.data) + offset;
        for (; i + kLanes <= n; i += kLanes) store(dst + i, load(src + i) * scale_v);
        for (; i < n; ++i) dst[i] = src[i] * scale;
        return;
    }
    uint16_t* dst = static_cast<uint16_t*>(o.data) + offset;
    if (o.dtype == FA_BFLOAT16) {
        for (; i + kLanes <= n; i += kLanes) {
            const HalfBits h = float_to_bf16(load(src + i) * scale_v);
            __builtin_memcpy(dst + i, &h, sizeof h);
        }
        for (; i < n; ++i) dst[i] = flashattn::float_to_bf16(src[i] * scale);
    } else {
        for (; i < n; ++i) dst[i] = flashattn::float_to_fp16(src[i] * scale);
    }
}

inline void zero_row(const OutRows& o, int64_t row, int64_t n) {
    const int64_t offset = o.first + row * o.row_stride;
    __builtin_memset(static_cast<char*>(o.data) + offset * dtype_size(o.dtype), 0, n * dtype_size(o.dtype));
}

FA_INLINE OutRows q_out_rows(const Problem& pr, const fa_tensor& t, const Span& s, int64_t row, int64_t h) {
    return {t.data, pr.p.dtype, pr.q_offset(t, s, row, h), t.row_stride};
}
FA_INLINE OutRows k_out_rows(const Problem& pr, const fa_tensor& t, const Span& s, int64_t row, int64_t h) {
    return {t.data, pr.p.dtype, pr.k_offset(t, s, row, h), t.row_stride};
}

