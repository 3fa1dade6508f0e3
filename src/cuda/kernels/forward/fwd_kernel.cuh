// The FlashAttention-2 forward kernel: one CTA per (query block, sequence, head).
//
//   Q block -> shared (once); for each K/V block, last to first:
//     S = Q K^T                         tensor cores, ldmatrix from swizzled shared memory
//     [scale/softcap/ALiBi] [mask]      mask only on blocks that need it
//     online softmax                    running max/sum in registers, quad shuffles, exp2
//     [dropout]                         Philox, the same elements as every backend
//     O += P V                          P stays in registers as the A operand
//   O /= sum, lse = max + log(sum)      once, at the end; O leaves through shared memory
//
// Loads overlap compute (cp.async), in one of two schedules (Traits::kKvStages, fwd_traits.cuh):
//   one K and one V buffer: V[n] is fetched while S = Q K[n]^T runs, K[n-1] while the softmax and
//     P V[n] run (compute-bound tiles: this is enough, and it costs the least shared memory);
//   a ring of kKvStages (K, V) pairs: K and V of block n - (kKvStages - 1) are fetched while block n
//     is computed (the inference variant, bound by reading the KV cache: several blocks in flight).
//
// Compile-time policies: kExtras. The plain kernel (the common case) folds the scale into exp2 and
// carries no transform or dropout code; the extras kernel switches softcap, ALiBi and dropout at
// run time. Masking, ragged sequence ends and head dims below the tile width are run-time
// decisions that cost nothing where they do not apply (uniform branches, per-block phases).
// kInference (with kExtras, its own tile: tiles::inference) adds, switched at run time, what
// serving needs (host/planner.cpp): K/V rows found through a block table (paged) or a KV cache's
// arrays (cache_seqlens, cache_batch_idx, cache_leftpad); split-KV, where CTA `split` visits only
// its share of the K/V blocks and writes its normalised O and lse in fp32 for combine.cu; and GQA
// packing, where the tile's rows are the query heads sharing a KV head (seqlen_q == 1).
#pragma once

#include "kernels/fwd_args.h"
#include "kernels/forward/fwd_traits.cuh"
#include "kernels/kernel_code.h"
#if FLASHATTN_KERNEL_CODE
#include "kernels/forward/fwd_products.cuh"
#include "device/online_softmax.cuh"
#include "device/score_policies.cuh"
#include "device/tile_ops.cuh"
#include "device/tile_order.cuh"
#endif

namespace flashattn::cuda::kernels {

using namespace cute;

template <typename Traits, bool kExtras, bool kInference = false>
__global__ void __launch_bounds__(Traits::kThreads, 1) fwd_kernel(const __grid_constant__ FwdArgs args) {
#if FLASHATTN_KERNEL_CODE
    static_assert(kExtras || !kInference, "the inference variant switches the extras at run time");
    using Element = typename Traits::Element;
    constexpr int kBlockM = Traits::kBlockM;
    constexpr int kBlockN = Traits::kBlockN;
    constexpr int kHeadDim = Traits::kHeadDim;
    const int tid = threadIdx.x;

    // Work item: (query block, [split,] sequence, head) in tile_order.cuh's order, heaviest query
    // blocks first (the inference variant: the query block fastest, then the split). Packed GQA:
    // the "head" is a KV head and h the first query head of its group (tile row r is query head h + r).
    InferenceWorkItem item;
    if constexpr (kInference) {
        item = inference_work_item(blockIdx.x, args);
    } else {
        const TileCoord tile =
            tile_of_block(blockIdx.x, args.num_m_blocks, args.batch * args.num_heads, args.section_heads);
        const int b = tile.bh / args.num_heads, h = tile.bh - b * args.num_heads;
        item = InferenceWorkItem{tile.m_block, 0, b, h, h / args.heads_per_kv_head, false};
    }
    const int m_block = item.m_block, split = item.split, b = item.b, h = item.h, h_kv = item.h_kv;
    const bool packed = item.packed;

    const SequenceBounds seq = sequence_bounds<kInference>(args, b);
    const int m0 = m_block * kBlockM;
    if (m0 >= seq.q_len) return;
    KvBlockRange range = kv_block_range<kBlockM, kBlockN>(args.mask, seq, m0);
    const bool write_partials = kInference && args.num_splits > 1;
    if (write_partials) range = split_share(range, split, args.num_splits);

    // Global tensors of this (sequence, head) (item_rows, tile_ops.cuh).
    const bool varlen = args.cu_seqlens_q != nullptr;
    const auto global_rows = item_rows<Element, kHeadDim>(args, seq, b, h, h_kv, packed);
    Tensor mQ = global_rows.q, mK = global_rows.k, mV = global_rows.v, mO = global_rows.o;
    Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));
    Tensor gO = local_tile(mO, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(m_block, 0));
    Tensor gK = local_tile(mK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0)); // (N, D, n_blocks)
    Tensor gV = local_tile(mV, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(_, 0));

    // Shared memory: Q, then kKvStages K blocks, then kKvStages V blocks. sK and sV are stage 0;
    // stage s lies s * kSmemKVElems further (a multiple of the swizzle period, so every view and
    // partition below stays valid when shifted: in_stage).
    constexpr int kStages = Traits::kKvStages;
    constexpr bool kRing = kStages > 1;
    extern __shared__ __align__(128) char smem[];
    Tensor sQ = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), typename Traits::SmemLayoutQ{});
    Tensor sK = make_tensor(sQ.data() + size(sQ), typename Traits::SmemLayoutKV{});
    Tensor sV = make_tensor(sK.data() + kStages * size(sK), typename Traits::SmemLayoutKV{});
    Tensor sVt = make_tensor(sV.data(), typename Traits::SmemLayoutVt{});

    // Global -> shared: this thread's chunks of Q, K and V (TileLoads, tile_ops.cuh).
    const TileLoads<typename Traits::GmemLoad, kBlockM, kBlockN, kHeadDim> loads(tid);
    auto tQ = loads.partition(gQ, sQ);
    auto tK = loads.partition(gK, sK);
    auto tV = loads.partition(gV, sV);
    Tensor tKVc = loads.kv_coords(); // (row, column) of this thread's chunks of a K or V tile
    Tensor column_ok = loads.column_ok(args.head_dim);

    // Tensor cores: S = Q K^T and O += P V (fwd_products.cuh), and the (row, key) coordinates of
    // this thread's S accumulator.
    typename Traits::TiledMma tiled_mma;
    auto mma_thr = tiled_mma.get_thread_slice(tid);
    Tensor acc_o = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kHeadDim>>{});
    clear(acc_o);
    const auto products = fwd_products<Traits>(tid, sQ, sK, sVt);
    Tensor s_coords = accumulator_coords<kBlockM, kBlockN>(mma_thr);

    Tensor acc_o_rows = make_tensor(acc_o.data(), rows_cols(acc_o.layout()));
    OnlineSoftmax<decltype(size<0>(acc_o_rows))::value> softmax;

    float exp_scale = args.scale_log2;
    float alibi_slope = 0.0f;
    DropoutKey dropout_key{};
    if constexpr (kExtras) {
        if (args.transform_scores) exp_scale = 1.4426950408889634f; // scores already carry the scale
        if (args.alibi_slopes) alibi_slope = args.alibi_slopes[int64_t(b) * args.alibi_batch_stride + h];
        if (args.dropout) dropout_key = args.dropout_key();
    }

    // A shared-memory tile (or a partition of one) of K or V moved to the ring stage of block n.
    // Single buffers: the tile itself (by reference: the plain kernel's code does not change).
    auto in_stage = [&](auto&& t, int n) __attribute__((always_inline)) -> decltype(auto) {
        if constexpr (kRing) {
            return make_tensor(t.data() + (n % kStages) * Traits::kSmemKVElems, t.layout());
        } else {
            (void)n;
            return t;
        }
    };

    // K or V block n into shared memory (its ring stage): rows of the tensor, or (paged, inference
    // variant only) rows found through the block table, at `pages` (resolved by the caller).
    PageTable page_table{kInference && args.block_table ? args.block_table + int64_t(b) * args.block_table_stride
                                                        : nullptr,
                         uint32_t(args.page_size), args.num_blocks};
    auto load_kv_pages = [&](const fa_tensor& t, auto& tX, int n, auto const& pages)
                             __attribute__((always_inline)) {
        const int rows_valid = seq.k_len - n * kBlockN;
        if constexpr (kInference) {
            if (args.block_table) {
                load_tile_paged(loads.copy, in_stage(tX.s, n), tKVc, column_ok, rows_valid,
                                static_cast<Element*>(t.data) + int64_t(h_kv) * t.head_stride, t.batch_stride,
                                t.row_stride, pages);
                return;
            }
        }
        loads.key_tile(tX.g(_, _, _, n), in_stage(tX.s, n), column_ok, rows_valid);
    };
    // The page slots of block n's rows: one table read per row pass of this thread, none unpaged.
    auto pages_of = [&](int n) __attribute__((always_inline)) {
        PageSlots<decltype(size<1>(tKVc))::value> pages{};
        if constexpr (kInference) {
            if (args.block_table)
                pages = page_slots(page_table, tKVc, seq.k_len - n * kBlockN, seq.k_row0 + int64_t(n) * kBlockN);
        }
        return pages;
    };
    // Single buffers: K and V load at different times, each resolves its own pages. The ring loads
    // K and V of a block together and resolves the pages once for both.
    auto load_kv = [&](const fa_tensor& t, auto& tX, int n) __attribute__((always_inline)) {
        load_kv_pages(t, tX, n, pages_of(n));
    };
    auto load_kv_block = [&](int n) __attribute__((always_inline)) {
        const auto pages = pages_of(n);
        load_kv_pages(args.k, tK, n, pages);
        load_kv_pages(args.v, tV, n, pages);
    };

    if (range.n_end > range.n_begin) {
        loads.query_tile(tQ.g, tQ.s, column_ok, seq.q_len - m0);
        if constexpr (kRing) { // blocks n_end - 1 .. n_end - (kStages - 1), one cp.async group each
            CUTE_UNROLL
            for (int i = 0; i < kStages - 1; ++i) {
                if (range.n_end - 1 - i >= range.n_begin) load_kv_block(range.n_end - 1 - i);
                cp_async_fence();
            }
        } else {
            load_kv(args.k, tK, range.n_end - 1);
            cp_async_fence();
        }
    }

    // One K/V block. kMasked is a compile-time tag, so the unmasked blocks run code without any
    // mask instructions (a run-time flag would be if-converted into predicated instructions that
    // every block issues). always_inline: its two call sites below must not become calls.
    auto process_block = [&](int n, auto masked_tag) __attribute__((always_inline)) {
        constexpr bool kMasked = decltype(masked_tag)::value;
        const int n0 = n * kBlockN;
        Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
        clear(acc_s);

        if constexpr (kRing) {
            cp_async_wait<kStages - 2>(); // block n (and Q) have landed ...
            __syncthreads(); // ... for every thread, and everyone is done with block n+1, whose stage
                             // block n - (kStages - 1) takes (one group per block, empty or not)
            if (n - (kStages - 1) >= range.n_begin) load_kv_block(n - (kStages - 1));
            cp_async_fence();
        } else {
            cp_async_wait<0>(); // K[n] (and Q) have landed ...
            __syncthreads();    // ... for every thread, and everyone is done reading V[n+1]
            load_kv(args.v, tV, n);
            cp_async_fence();
        }

        products.qk(acc_s, products.qk.a, in_stage(products.qk.b, n));

        Tensor scores = make_tensor(acc_s.data(), rows_cols(acc_s.layout()));
        if constexpr (kExtras) {
            if (args.transform_scores) apply_score_transform(scores, s_coords, args, alibi_slope, seq, m0, n0);
        }
        if constexpr (kMasked) apply_key_mask(scores, s_coords, args.mask, seq, m0, n0);

        if constexpr (!kRing) {
            cp_async_wait<0>(); // V[n] has landed ...
            __syncthreads();    // ... for every thread, and everyone is done reading K[n]
            if (n > range.n_begin) {
                load_kv(args.k, tK, n - 1);
                cp_async_fence();
            }
        }

        softmax.absorb(scores, acc_o_rows, exp_scale);
        if constexpr (kExtras) {
            if (args.dropout) apply_dropout(scores, s_coords, args, dropout_key, b, h, m0, n0);
        }

        products.add_pv(acc_o, acc_s, in_stage(products.pv.b, n));
    };

    // K/V blocks from the last to the first. The ones that need the key mask (the diagonal, the
    // ragged tail, a local window's edges) sit at the two ends of the range, so this runs masked,
    // unmasked, then masked again (local windows only): two copies of the block code, not three.
    for (int n = range.n_end - 1; n >= range.n_begin;) {
        for (; n >= range.n_begin && (n >= range.unmasked_end || n < range.unmasked_begin); --n)
            process_block(n, cute::true_type{});
        for (; n >= range.n_begin && n >= range.unmasked_begin && n < range.unmasked_end; --n)
            process_block(n, cute::false_type{});
    }

    // Epilogue: normalise, lse, O through shared memory (Q's buffer) to 16-byte global stores.
    float row_lse[decltype(size<0>(acc_o_rows))::value];
    if constexpr (kExtras) { // (the launcher runs sinks on the extras kernel)
        if (split == 0) absorb_sinks(softmax, acc_o_rows, args, s_coords, h, packed, m0, seq.q_len, exp_scale);
    }
    // A sequence with an index out of range (a block table entry: any thread may have met it) leaves NaN.
    bool faulted = seq.faulted;
    if constexpr (kInference) {
        faulted = __syncthreads_or(page_table.faulted) || faulted;
        page_table.report(args.fault, b);
    }
    softmax.finish(acc_o_rows, exp_scale, kExtras && args.dropout ? args.keep_rescale : 1.0f, row_lse, faulted);

    // (query head, query row) of tile row i.
    auto head_of = [&](int i) { return packed ? h + i : h; };
    auto row_of = [&](int i) { return packed ? 0 : i; };

    if constexpr (kInference) {
        if (write_partials) { // fp32 O and lse of this split, straight from registers (dense q only)
            Tensor o_coords = accumulator_coords<kBlockM, kHeadDim>(mma_thr);
            const int64_t split_row0 = (int64_t(split) * args.batch + b) * args.seqlen_q;
            CUTE_UNROLL
            for (int r = 0; r < size<0>(o_coords); ++r) {
                const int i = m0 + get<0>(o_coords(r, 0));
                if (i >= seq.q_len) continue;
                const int head = head_of(i), row = row_of(i);
                if (get<1>(o_coords(r, 0)) == 0)
                    args.lse_accum[((int64_t(split) * args.batch + b) * args.num_heads + head) * args.seqlen_q + row] =
                        row_lse[r];
                float* o_row = args.out_accum + ((split_row0 + row) * args.num_heads + head) * args.head_dim;
                CUTE_UNROLL
                for (int c = 0; c < size<1>(o_coords); c += 2) { // neighbouring column pairs
                    const int col = get<1>(o_coords(r, c));
                    if (col < args.head_dim)
                        *reinterpret_cast<float2*>(o_row + col) = make_float2(acc_o_rows(r, c), acc_o_rows(r, c + 1));
                }
            }
            return;
        }
    }

    Tensor o = convert_fragment<Element>(acc_o);
    Tensor sO = make_tensor(sQ.data(), typename Traits::SmemLayoutO{});
    auto copy_o = make_tiled_copy_C(typename Traits::SmemCopyO{}, tiled_mma);
    auto copy_o_thr = copy_o.get_thread_slice(tid);
    Tensor tOrO_view = copy_o_thr.retile_S(o);
    Tensor tOsO = copy_o_thr.partition_D(sO);
    cp_async_wait<0>();
    __syncthreads(); // every warp is done with sQ / sV
    copy(copy_o, tOrO_view, tOsO);

    if (args.lse) {
        Tensor o_coords = accumulator_coords<kBlockM, kHeadDim>(mma_thr);
        if (get<1>(o_coords(0, 0)) == 0) { // one lane of each quad writes its rows
            CUTE_UNROLL
            for (int r = 0; r < size<0>(o_coords); ++r) {
                const int i = m0 + get<0>(o_coords(r, 0));
                if (i < seq.q_len) {
                    const int head = head_of(i), row = row_of(i);
                    const int64_t index = varlen ? int64_t(head) * args.total_q + seq.q_row0 + row
                                                 : (int64_t(b) * args.num_heads + head) * args.seqlen_q + row;
                    args.lse[index] = row_lse[r];
                }
            }
        }
    }

    __syncthreads();
    store_tile<typename Traits::GmemStore>(tid, sO, gO, column_ok, seq.q_len - m0);
#endif
}

} // namespace flashattn::cuda::kernels
