// The FA2 backward on the CPU. One task owns a chunk of key/value blocks of one (sequence, KV
// head); for each of its blocks it sweeps the query blocks (of every query head sharing the KV
// head) that may see it, recomputes S and P from the saved lse, and accumulates dK and dV in fp32
// scratch it alone writes:
//
//   P  = e^(S - lse)                      (S = Q K^T through the score policy)
//   dP = dO V^T                           dS = P * (dP * keep - dsum) [* (1 - tanh^2) with softcap]
//   dV += (P * keep)^T dO                 dK += dS^T Q          dQ_chunk += dS K
//
// with dsum = rowsum(dO * O) computed beforehand. A learnable sink changes none of this: the lse the
// forward saved includes it, so P is right, and it has no value, so dsum is too. Its own gradient,
// dsink = -sum_i p_sink(i) dsum_i with p_sink(i) = exp(sink - lse_i), is a by-product of the dsum
// pass. V, dO and dV are head_dim_v wide, Q, K, dQ and dK head_dim.
//
// dQ is reduced without races and in a fixed order: each chunk accumulates into its own fp32
// buffer, and a last pass adds the chunks in chunk order. The number of chunks depends on the
// problem's shape only, never on the thread count, so the gradients are bitwise identical on any
// number of threads.
//
// Here S is kept as computed (query rows down, keys across the lanes): the per-row lse and dsum are
// broadcasts, and dS^T, P^T are read as column-major A operands without transposing anything.

struct BackwardLayout {
    int64_t block_q, block_k, head_dim, head_dim_pad;
    int64_t head_dim_v, head_dim_v_pad; // of V, dO and dV
    int64_t chunks;       // KV-block chunks per (sequence, KV head): chunk c owns blocks c, c + chunks, ...
    bool k_in_place;      // else each task converts its key blocks
};

struct BackwardScratch {
    float* k;        // block_k x head_dim_pad (B operand of dQ), when K is converted
    float* k_t;      // head_dim x block_k (B operand of S)
    float* v_t;      // head_dim_v x block_k (B operand of dP)
    float* dk;       // block_k x head_dim_pad accumulators
    float* dv;       // block_k x head_dim_v_pad
    float* p;        // block_q x block_k: P, then P * keep
    float* ds;       // block_q x block_k: dS
    float* keep;     // block_q x block_k: 1/(1-p) or 0 (dropout only)
    float* slope;    // block_q x block_k: 1 - tanh^2 (softcap only)
    float* lse;      // block_q: lse of the block's rows (+inf: the row saw no key)
    float* dsum;     // block_q
    int32_t* key_begin;
    int32_t* key_end;
};

inline BackwardScratch carve_backward_scratch(const Problem& pr, const BackwardLayout& lay, char* slab,
                                              size_t* bytes) {
    SlabCarver c{slab};
    const int64_t bq = lay.block_q, bk = lay.block_k, d = lay.head_dim, d_pad = lay.head_dim_pad;
    BackwardScratch s;
    s.k = lay.k_in_place ? nullptr : c.take<float>(bk * d_pad);
    s.k_t = c.take<float>(d * bk);
    s.v_t = c.take<float>(lay.head_dim_v * bk);
    s.dk = c.take<float>(bk * d_pad);
    s.dv = c.take<float>(bk * lay.head_dim_v_pad);
    s.p = c.take<float>(bq * bk);
    s.ds = c.take<float>(bq * bk);
    s.keep = pr.has_dropout() ? c.take<float>(bq * bk) : nullptr;
    s.slope = pr.p.softcap > 0.0f ? c.take<float>(bq * bk) : nullptr;
    s.lse = c.take<float>(bq);
    s.dsum = c.take<float>(bq);
    s.key_begin = c.take<int32_t>(bq);
    s.key_end = c.take<int32_t>(bq);
    if (bytes) *bytes = c.used;
    return s;
}

// Epilogue of S = Q K^T: score policy, then P = e^(t - lse) directly (lse is known: no max pass).
template <bool kTransform, bool kMask>
struct ProbabilitiesFromScores {
    float* p;
    float* slope; // 1 - tanh^2 when softcap is on
    int64_t ld;
    const float* lse;
    const int32_t* key_begin;
    const int32_t* key_end;
    int64_t j0, i0;
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
        float* const probs = p + row0 * ld;
        float* const slopes = slope ? slope + row0 * ld : nullptr;
        const int64_t out_ld = ld;
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            const int64_t row = row0 + r;
            const Vec lse_row = broadcast(lse + row);
            const IVec begin = splat_int(key_begin[row]), end = splat_int(key_end[row]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) {
                const int64_t col = col0 + v * kLanes;
                Vec t;
                if constexpr (kTransform) {
                    // i + diagonal - j for j = j0 + col + lane
                    const Vec offset = splat(static_cast<float>(i0 + row + params.diagonal - j0 - col)) -
                                       __builtin_convertvector(lane_index(), Vec);
                    Vec tanh_slope = splat(1.0f);
                    t = transformed_score(tile.acc[r][v] * scale, offset, params, &tanh_slope);
                    if (slopes) store(slopes + r * out_ld + col, tanh_slope);
                } else {
                    t = tile.acc[r][v] * scale;
                }
                if constexpr (kMask) {
                    const IVec key = splat_int(static_cast<int32_t>(j0 + col)) + lane_index();
                    t = select((key >= begin) & (key < end), t, splat(-kInf));
                }
                store(probs + r * out_ld + col, exp2((t - lse_row) * log2e));
            }
        }
    }
};

// Epilogue of dP = dO V^T: dS = P * (dP * keep - dsum) [* (1 - tanh^2)].
template <bool kDropout, bool kSoftcap>
struct ScoreGradient {
    const float* p;
    const float* keep;
    const float* slope;
    float* ds;
    int64_t ld;
    const float* dsum;

    template <int MR, int NV>
    FA_INLINE void finish(const Tile<MR, NV>& tile, int64_t row0, int64_t col0) {
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {
            const int64_t row = row0 + r;
            const Vec dsum_row = broadcast(dsum + row);
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) {
                const int64_t at = row * ld + col0 + v * kLanes;
                Vec dp = tile.acc[r][v];
                if constexpr (kDropout) dp *= load(keep + at);
                Vec g = load(p + at) * (dp - dsum_row);
                if constexpr (kSoftcap) g *= load(slope + at);
                store(ds + at, g);
            }
        }
    }
};

// Shared, read-only state of the backward's passes.
struct BackwardJob {
    const BwdProblem* bwd;
    BackwardLayout lay;
    RowsSource q, dout;   // packed in pass 1 when they cannot be read in place
    float* lse;           // per lse entry: the lse, +inf for rows that saw no key
    float* dsum;          // per lse entry: rowsum(dO * O)
    float* dq_chunks;     // [chunk][head][q row][head_dim_pad] fp32 partial dQ
    uint8_t* dq_touched;  // [chunk][head][q block]: did the chunk write this block's partial dQ
    int64_t q_rows_total; // rows of the packed/dense q: varlen ? total_q : batch * seqlen_q
    const int64_t* q_block_base; // first global q block of each sequence (batch + 1 entries)
    int64_t q_blocks_total;
    double* dsink_parts;  // [head][global q block]: sum over the block's rows of p_sink * dsum (with dsink)
    char* slabs;
    size_t slab_bytes;
};

inline int64_t q_row_global(const Problem& pr, const Span& span, int64_t i) {
    return pr.varlen ? span.q_row0 + i : span.batch * pr.p.seqlen_q + i;
}

inline float* dq_chunk_rows(const BackwardJob& job, int64_t chunk, int64_t h, int64_t global_row) {
    const int64_t heads = job.bwd->fwd.p.num_heads;
    return job.dq_chunks + ((chunk * heads + h) * job.q_rows_total + global_row) * job.lay.head_dim_pad;
}

inline uint8_t& dq_touched(const BackwardJob& job, int64_t chunk, int64_t h, int64_t global_block) {
    const int64_t heads = job.bwd->fwd.p.num_heads;
    return job.dq_touched[(chunk * heads + h) * job.q_blocks_total + global_block];
}

// Pass 1, per (sequence, head, q block): dsum and the lse of every row, and with dsink the
// block's share of it.
inline void prepare_rows(const BackwardJob& job, const Span& span, int64_t h, int64_t q_block) {
    const Problem& pr = job.bwd->fwd;
    const int64_t d = pr.head_dim_v(); // dO and O
    const float sink = pr.sink(h);
    double sink_share = 0.0;
    const int64_t i0 = q_block * job.lay.block_q;
    const int64_t rows = min64(job.lay.block_q, span.q_len - i0);
    const RowsView dout = q_rows(pr, job.bwd->p.dout, span, i0, h);
    const RowsView out = q_rows(pr, pr.p.out, span, i0, h);
    pack_rows(pr, job.q, span, h, i0, rows);
    pack_rows(pr, job.dout, span, h, i0, rows);
    float dout_row[256], out_row[256];
    for (int64_t r = 0; r < rows; ++r) {
        convert_row(dout, r, d, dout_row);
        convert_row(out, r, d, out_row);
        Vec acc = {};
        int64_t c = 0;
        for (; c + kLanes <= d; c += kLanes) acc += load(dout_row + c) * load(out_row + c);
        float sum = 0.0f;
        for (int l = 0; l < kLanes; ++l) sum += acc[l];
        for (; c < d; ++c) sum += dout_row[c] * out_row[c];
        const int64_t index = pr.lse_index(span, i0 + r, h);
        job.dsum[index] = sum;
        const float lse = pr.p.softmax_lse[index];
        job.lse[index] = lse > -kInf ? lse : kInf;
        if (job.dsink_parts) sink_share += double(__builtin_exp2f((sink - lse) * kLog2e) * sum);
    }
    if (job.dsink_parts) job.dsink_parts[h * job.q_blocks_total + job.q_block_base[span.batch] + q_block] = sink_share;
}

// Pass 2, per (sequence, KV head, chunk).
inline void backward_chunk(const BackwardJob& job, const BackwardScratch& s, const Span& span, int64_t h_k,
                           int64_t chunk) {
    const BwdProblem& bp = *job.bwd;
    const Problem& pr = bp.fwd;
    const BackwardLayout& lay = job.lay;
    const int64_t d = lay.head_dim, d_pad = lay.head_dim_pad, bq = lay.block_q, bk = lay.block_k;
    const int64_t dv = lay.head_dim_v, dv_pad = lay.head_dim_v_pad;
    const float scale = pr.scale;
    const int64_t key_blocks = ceil_div(span.k_len, bk);
    const int64_t q_blocks = ceil_div(span.q_len, bq);
    const RowsView k_view = k_rows(pr, pr.p.k, span, 0, h_k);
    const RowsView v_view = k_rows(pr, pr.p.v, span, 0, h_k);

    for (int64_t kb = chunk; kb < key_blocks; kb += lay.chunks) {
        const int64_t j0 = kb * bk;
        const int64_t keys = min64(bk, span.k_len - j0);
        const int64_t keys_pad = round_up(keys, kLanes);

        const RowsView k_block = advanced(k_view, j0), v_block = advanced(v_view, j0);
        Fp32Rows k{s.k, d_pad};
        if (lay.k_in_place) k = {in_place(k_block), k_block.row_stride};
        else load_rows(k_block, keys, d, d_pad, s.k, d_pad);
        load_rows_transposed(k_block, keys, keys_pad, d, s.k_t, bk);
        load_rows_transposed(v_block, keys, keys_pad, dv, s.v_t, bk);
        __builtin_memset(s.dk, 0, keys * d_pad * sizeof(float));
        __builtin_memset(s.dv, 0, keys * dv_pad * sizeof(float));

        for (int64_t h = h_k * pr.group; h < (h_k + 1) * pr.group; ++h) {
            const ScoreParams sp = score_params(pr, span, h);
            for (int64_t qb = 0; qb < q_blocks; ++qb) {
                const int64_t i0 = qb * bq;
                const int64_t rows = min64(bq, span.q_len - i0);
                compute_row_ranges(pr, span, i0, rows, rows, s.key_begin, s.key_end);
                const Coverage cover = coverage(s.key_begin, s.key_end, rows, j0, j0 + keys);
                if (cover == Coverage::none) continue;

                const Fp32Rows q = job.q.rows(pr, span, h, i0);
                const Fp32Rows dout = job.dout.rows(pr, span, h, i0);
                for (int64_t r = 0; r < rows; ++r) {
                    const int64_t index = pr.lse_index(span, i0 + r, h);
                    s.lse[r] = job.lse[index];
                    s.dsum[r] = job.dsum[index];
                }

                // P from S
                with_flags(sp.transforms(), cover != Coverage::full, [&](auto transform, auto mask) {
                    ProbabilitiesFromScores<decltype(transform)::value != 0, decltype(mask)::value != 0> epilogue{
                        s.p, s.slope, bk, s.lse, s.key_begin, s.key_end, j0, i0, sp};
                    matmul(rows, keys_pad, d, RowMajor{q.data, q.ld}, s.k_t, bk, epilogue);
                });

                // dS from dP
                if (pr.has_dropout())
                    dropout_keep_tile(DropoutRows(pr, span, h), 1.0f / (1.0f - pr.p.dropout_p), s.keep, bk, i0, rows,
                                      j0, keys_pad);
                auto gradient = [&](auto dropout, auto softcap) {
                    ScoreGradient<decltype(dropout)::value != 0, decltype(softcap)::value != 0> epilogue{
                        s.p, s.keep, s.slope, s.ds, bk, s.dsum};
                    matmul(rows, keys_pad, dv, RowMajor{dout.data, dout.ld}, s.v_t, bk, epilogue);
                };
                with_flags(pr.has_dropout(), pr.p.softcap > 0.0f, gradient);
                if (pr.has_dropout())
                    for (int64_t r = 0; r < rows; ++r)
                        for (int64_t j = 0; j < keys_pad; j += kLanes)
                            store(s.p + r * bk + j, load(s.p + r * bk + j) * load(s.keep + r * bk + j));

                // dV += (P keep)^T dO,  dK += dS^T Q   (tile rows = keys, depth = query rows)
                Accumulate<false> into_dv{s.dv, dv_pad}, into_dk{s.dk, d_pad};
                matmul(keys, dv_pad, rows, ColMajor{s.p, bk}, dout.data, dout.ld, into_dv);
                matmul(keys, d_pad, rows, ColMajor{s.ds, bk}, q.data, q.ld, into_dk);

                // dQ_chunk += dS K   (scaled once, in the reduction)
                const int64_t global_block = job.q_block_base[span.batch] + qb;
                uint8_t& touched = dq_touched(job, chunk, h, global_block);
                float* dq_rows = dq_chunk_rows(job, chunk, h, q_row_global(pr, span, i0));
                if (touched) {
                    Accumulate<false> epilogue{dq_rows, d_pad};
                    matmul(rows, d_pad, keys, RowMajor{s.ds, bk}, k.data, k.ld, epilogue);
                } else {
                    Accumulate<true> epilogue{dq_rows, d_pad};
                    matmul(rows, d_pad, keys, RowMajor{s.ds, bk}, k.data, k.ld, epilogue);
                    touched = 1;
                }
            }
        }

        const OutRows dk_out = k_out_rows(pr, bp.p.dk, span, j0, h_k);
        const OutRows dv_out = k_out_rows(pr, bp.p.dv, span, j0, h_k);
        for (int64_t r = 0; r < keys; ++r) {
            store_row(dk_out, r, s.dk + r * d_pad, d, scale);
            store_row(dv_out, r, s.dv + r * dv_pad, dv, 1.0f);
        }
    }

    // Keys this sequence has but may not use (seqused_k) get zero gradients.
    if (chunk == 0) {
        const int64_t k_rows_stored =
            pr.varlen ? int64_t(pr.p.cu_seqlens_k[span.batch + 1]) - pr.p.cu_seqlens_k[span.batch] : pr.p.seqlen_k;
        const OutRows dk_out = k_out_rows(pr, bp.p.dk, span, 0, h_k);
        const OutRows dv_out = k_out_rows(pr, bp.p.dv, span, 0, h_k);
        for (int64_t j = span.k_len; j < k_rows_stored; ++j) {
            zero_row(dk_out, j, d);
            zero_row(dv_out, j, dv);
        }
    }
}

// Pass 3, per (sequence, head, q block): dQ = scale * sum over chunks, in chunk order.
inline void reduce_dq(const BackwardJob& job, float* acc, const Span& span, int64_t h, int64_t q_block) {
    const BwdProblem& bp = *job.bwd;
    const Problem& pr = bp.fwd;
    const int64_t d = pr.head_dim(), d_pad = job.lay.head_dim_pad;
    const int64_t i0 = q_block * job.lay.block_q;
    const int64_t rows = min64(job.lay.block_q, span.q_len - i0);
    const int64_t global_block = job.q_block_base[span.batch] + q_block;
    const OutRows dq_out = q_out_rows(pr, bp.p.dq, span, i0, h);
    const int64_t row0 = q_row_global(pr, span, i0);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < d_pad; c += kLanes) store(acc + c, Vec{});
        for (int64_t chunk = 0; chunk < job.lay.chunks; ++chunk) {
            if (!dq_touched(job, chunk, h, global_block)) continue;
            const float* partial = dq_chunk_rows(job, chunk, h, row0 + r);
            for (int64_t c = 0; c < d_pad; c += kLanes) store(acc + c, load(acc + c) + load(partial + c));
        }
        store_row(dq_out, r, acc, d, pr.scale);
    }
}
