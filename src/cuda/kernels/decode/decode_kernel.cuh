// The split-keys decode kernel: the inference variant's algorithm (fwd_kernel.cuh) for tiles of at
// most 16 query rows, with the keys of a CTA's range split across its warps.
//
// Decoding reads the whole KV cache once and computes little on it (packed GQA: 4 query heads per
// KV head fill 4 of a tile's 16 rows), so its speed is how many bytes of K and V every SM keeps in
// flight, all the time. The 64-row tile (4 warps on one query tile) spends 3/4 of its MMAs on
// empty rows and stops all four warps at a CTA barrier per block; the narrow tile (one warp) left
// one SM sub-partition idle and few loads in flight. Here:
//
//   one CTA per (16-row query block, split, sequence, KV head when packed), kWarps warps;
//   Q -> shared once (warp 0) -> registers of every warp up to d128 (one CTA barrier, at the start);
//   warp w visits the blocks n_end - 1 - w, n_end - 1 - w - kWarps, ... of the CTA's range, each
//     through its own ring of kKvStages (K, V) stages: block i + kKvStages - 1 of the warp is
//     fetched (cp.async, one group per block) while block i is computed; a warp waits only for its
//     own groups (cp.async.wait_group + __syncwarp), never for the other warps;
//   per block, the ordinary kernel's steps: S = Q K^T, [transform] [mask], online softmax, O += P V
//     (score_policies.cuh, online_softmax.cuh, tile_ops.cuh); O is rescaled only when some row's
//     max grew (after the first blocks it rarely does: 64 multiplies a thread saved per block);
//   at the end each warp normalises its (O, lse) (OnlineSoftmax::finish) and the kWarps partial
//     results meet in shared memory (over the rings, now idle), merged by their logsumexp as
//     combine.cu merges splits; the CTA writes out and lse, or one split's fp32 partial.
//
// The kernel is as much bound by its instruction issue as by HBM (Nsight Compute, docs/perf-log.md: 703
// instructions per warp and 16-key block at 85% of DRAM bandwidth, cuDNN's decode kernel 288 per 16
// keys at 89%), so the per-block path is kept short: whole blocks are copied by unpredicated
// cp.asyncs from a base address plus constants (SwizzledTileCopy), and dropout, which would put
// its ~200 predicated instructions into every block, is not compiled here (the 64-row tile serves
// it; host/planner.cpp).
//
// Paged K/V: a warp resolves the page slots of its next block one step ahead (PageTable::slots),
// so the table read is not on the path from a stage's release to its refill.
#pragma once

#include "kernels/kernel_code.h"
#if FLASHATTN_KERNEL_CODE
#include "device/dependent_launch.h"
#endif
#include "kernels/fwd_args.h"
#include "kernels/forward/fwd_traits.cuh"
#if FLASHATTN_KERNEL_CODE
#include "kernels/forward/fwd_products.cuh"
#include "device/online_softmax.cuh"
#include "device/score_policies.cuh"
#include "device/tile_ops.cuh"
#include "device/tile_order.cuh"

#include "core/lse_merge.h"

#include <cutlass/fast_math.h>
#endif

#include <type_traits>

namespace flashattn::cuda::kernels {

using namespace cute;

// Which of a CTA's K/V blocks a warp visits and the ring stage each lands in. The warp's blocks are
// top, top - kWarps, ... down to the range's first (top = n_end - 1 - warp); its i-th block uses
// stage i % kStages; the step of block n fetches the warp's block kStages - 1 steps later, into the
// stage of the warp's previous block (which the warp is done with by this step's __syncwarp).
// tests/gpu/layout_check.cu replays it with the kernel's cp.async group counts.
template <int kWarps, int kStages>
struct WarpBlockRing {
    int top;

    __host__ __device__ __forceinline__ int stage(int n) const {
        return int(unsigned(top - n) / unsigned(kWarps)) % kStages;
    }
    __host__ __device__ __forceinline__ int prologue_block(int i) const { return top - i * kWarps; } // i < kStages - 1
    __host__ __device__ __forceinline__ static int fetched_during(int n) { return n - (kStages - 1) * kWarps; }
};

// How a loop of the kernel copies the K/V blocks it fetches (see process_block), and which kernel
// a call runs (split_keys_loads): a kernel holds only its own loops, so that the path one call
// executes is short and contiguous in the code. (One kernel with all three loop pairs was 8.8k
// instructions, 141 KB; Nsight Compute: at 1k x 16, 29% of the warps' time went to instruction
// fetch, most of it on code run once per warp after a jump across the loops it did not run.)
enum class BlockLoads {
    predicated,       // any cache: rows and columns checked, paged rows looked up per pass
    whole_contiguous, // whole blocks of a contiguous cache, head_dim == kHeadDim
    whole_paged,      // whole blocks of a paged cache whose page size is a multiple of kBlockN,
                      // without left padding (which may start a sequence inside a block)
};

template <typename Traits, BlockLoads kLoads>
__global__ void __launch_bounds__(Traits::kThreads) fwd_split_keys_kernel(const __grid_constant__ FwdArgs args) {
#if FLASHATTN_KERNEL_CODE
    using Warp = typename Traits::Warp; // one warp's tile, MMA, copies and ring stage
    using Element = typename Warp::Element;
    constexpr int kWarps = Traits::kWarps;
    constexpr int kBlockM = Warp::kBlockM;
    constexpr int kBlockN = Warp::kBlockN;
    constexpr int kHeadDim = Warp::kHeadDim;
    constexpr int kStages = Warp::kKvStages;
    static_assert(kStages >= 2 && kBlockM == 16);
    // The host (split_keys_loads) runs the whole-block kernels only where they apply: no block
    // table for whole_contiguous, one for whole_paged.
    const bool paged = kLoads == BlockLoads::whole_paged || (kLoads == BlockLoads::predicated && args.block_table);
    const int tid = threadIdx.x;
    const int warp = tid / 32, lane = tid % 32;

    const InferenceWorkItem item = inference_work_item(blockIdx.x, args);
    const int b = item.b, h = item.h, h_kv = item.h_kv, split = item.split;
    const bool packed = item.packed;
    const SequenceBounds seq = sequence_bounds<true>(args, b);
    const int m0 = item.m_block * kBlockM;
    if (m0 >= seq.q_len) return;
    const bool write_partials = args.num_splits > 1;
    KvBlockRange range = kv_block_range<kBlockM, kBlockN>(args.mask, seq, m0);
    if (write_partials) range = split_share(range, split, args.num_splits);

    // Global tensors of this (sequence, head) (item_rows, tile_ops.cuh; packed heads: Q and O rows
    // are the group's heads).
    const bool varlen = args.cu_seqlens_q != nullptr;
    const auto global_rows = item_rows<Element, kHeadDim>(args, seq, b, h, h_kv, packed);
    Tensor mQ = global_rows.q, mK = global_rows.k, mV = global_rows.v, mO = global_rows.o;
    Tensor gQ = local_tile(mQ, Shape<Int<kBlockM>, Int<kHeadDim>>{}, make_coord(item.m_block, 0));

    // Shared memory (SplitKeysDecodeTraits): Q, then this warp's ring (K stages, then V stages).
    extern __shared__ __align__(128) char smem[];
    Tensor sQ = make_tensor(make_smem_ptr(reinterpret_cast<Element*>(smem)), typename Warp::SmemLayoutQ{});
    Tensor sK = make_tensor(sQ.data() + size(sQ) + warp * Traits::kWarpRingElems, typename Warp::SmemLayoutKV{});
    Tensor sV = make_tensor(sK.data() + kStages * size(sK), typename Warp::SmemLayoutKV{});
    Tensor sVt = make_tensor(sV.data(), typename Warp::SmemLayoutVt{});

    // Global -> shared, by the lanes of this warp: Q (once) by a CuTe tiled copy, K/V blocks by
    // KvCopy, whose chunks are the tiled copy's (tKVc: their rows, for the page-table lookups).
    const TileLoads<typename Warp::GmemLoad, kBlockM, kBlockN, kHeadDim> loads(lane);
    auto tQ = loads.partition(gQ, sQ);
    Tensor tQc = loads.q_coords();
    Tensor tKVc = loads.kv_coords();
    Tensor column_ok = loads.column_ok(args.head_dim);
    using KvCopy = typename Traits::KvCopy;
    static_assert(KvCopy::kPasses == decltype(size<1>(tKVc))::value);
    const KvCopy kv_copy(lane);
    constexpr uint32_t kStageBytes = Warp::kSmemKVElems * sizeof(Element);
    const uint32_t smem_k = cast_smem_ptr_to_uint(raw_pointer_cast(sK.data()));
    const uint32_t smem_v = cast_smem_ptr_to_uint(raw_pointer_cast(sV.data()));

    // Tensor cores, one warp. Up to d128 Q stays in registers (A of S = Q K^T) for the whole loop;
    // above, with O's accumulator twice as large, that spills, and Q is read from shared memory per
    // block as in fwd_kernel. P stays in registers (A of O += P V).
    constexpr bool kQInRegisters = kHeadDim <= 128;
    typename Warp::TiledMma tiled_mma;
    auto mma_thr = tiled_mma.get_thread_slice(lane);
    Tensor acc_o = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kHeadDim>>{});
    clear(acc_o);
    const auto products = fwd_products<Warp>(lane, sQ, sK, sVt);
    Tensor q_regs = products.qk.a_fragment();
    Tensor s_coords = accumulator_coords<kBlockM, kBlockN>(mma_thr);
    Tensor acc_o_rows = make_tensor(acc_o.data(), rows_cols(acc_o.layout()));
    constexpr int kRows = decltype(size<0>(acc_o_rows))::value;
    OnlineSoftmax<kRows> softmax;

    float exp_scale = args.scale_log2;
    float alibi_slope = 0.0f;
    if (args.transform_scores) exp_scale = 1.4426950408889634f; // scores already carry the scale
    if (args.alibi_slopes) alibi_slope = args.alibi_slopes[int64_t(b) * args.alibi_batch_stride + h];

    // This warp's blocks and their stages.
    const WarpBlockRing<kWarps, kStages> ring{range.n_end - 1 - warp};
    auto in_stage = [&](auto&& t, int n) __attribute__((always_inline)) {
        return make_tensor(t.data() + ring.stage(n) * Warp::kSmemKVElems, t.layout());
    };
    const Element* k_rows = raw_pointer_cast(mK.data()); // the sequence's first key row (contiguous K/V)
    const Element* v_rows = raw_pointer_cast(mV.data());
    const Element* k_head = static_cast<const Element*>(args.k.data) + int64_t(h_kv) * args.k.head_stride;
    const Element* v_head = static_cast<const Element*>(args.v.data) + int64_t(h_kv) * args.v.head_stride;

    PageTable page_table{paged ? args.block_table + int64_t(b) * args.block_table_stride : nullptr,
                         uint32_t(args.page_size), args.num_blocks};
    using Pages = PageSlots<decltype(size<1>(tKVc))::value>;
    // The page slots of the rows this thread copies of block n (paged K/V, any alignment).
    auto pages_of = [&](int n) __attribute__((always_inline)) {
        Pages pages{};
        if (paged && n >= range.n_begin)
            pages = page_slots(page_table, tKVc, seq.k_len - n * kBlockN, seq.k_row0 + int64_t(n) * kBlockN);
        return pages;
    };
    // Where block n's K and V rows start when they are consecutive rows: a contiguous cache, or a
    // paged one whose blocks each lie inside one page (the page size a multiple of kBlockN and the
    // sequence's first row on a block boundary: no left padding, or a multiple of kBlockN).
    struct BlockRows {
        const Element* k;
        const Element* v;
    };
    const cutlass::FastDivmod page_divmod(paged ? args.page_size : 1); // a multiply, not a division
    auto block_rows_of = [&](int n, auto paged_tag) __attribute__((always_inline)) {
        BlockRows rows{k_rows, v_rows};
        if (n < range.n_begin) return rows;
        if constexpr (decltype(paged_tag)::value) {
            int page, row;
            page_divmod(page, row, int(seq.k_row0) + n * kBlockN);
            const int64_t block = page_table.block(page);
            rows.k = k_head + block * args.k.batch_stride + int64_t(row) * args.k.row_stride;
            rows.v = v_head + block * args.v.batch_stride + int64_t(row) * args.v.row_stride;
        } else {
            rows.k = k_rows + int64_t(n) * kBlockN * args.k.row_stride;
            rows.v = v_rows + int64_t(n) * kBlockN * args.v.row_stride;
        }
        return rows;
    };
    // K and V of block n into its stage, rows past the sequence and columns past head_dim zero-filled
    // by the cp.async itself (source size 0); `pages`: its rows' page slots (paged K/V only).
    auto load_kv_block = [&](int n, Pages const& pages) __attribute__((always_inline)) {
        const int rows_valid = seq.k_len - n * kBlockN;
        const uint32_t k_stage = smem_k + ring.stage(n) * kStageBytes;
        const uint32_t v_stage = smem_v + ring.stage(n) * kStageBytes;
        if (paged) {
            const Element* k_pass[KvCopy::kPasses];
            const Element* v_pass[KvCopy::kPasses];
            CUTE_UNROLL
            for (int m = 0; m < KvCopy::kPasses; ++m) {
                k_pass[m] = k_head + int64_t(pages[m].block) * args.k.batch_stride + int64_t(pages[m].row) * args.k.row_stride;
                v_pass[m] = v_head + int64_t(pages[m].block) * args.v.batch_stride + int64_t(pages[m].row) * args.v.row_stride;
            }
            kv_copy.load_async_rows(k_stage, k_pass, rows_valid, args.head_dim, k_head);
            kv_copy.load_async_rows(v_stage, v_pass, rows_valid, args.head_dim, v_head);
        } else {
            kv_copy.load_async(k_stage, k_rows + int64_t(n) * kBlockN * args.k.row_stride, args.k.row_stride,
                               rows_valid, args.head_dim, k_rows);
            kv_copy.load_async(v_stage, v_rows + int64_t(n) * kBlockN * args.v.row_stride, args.v.row_stride,
                               rows_valid, args.head_dim, v_rows);
        }
    };
    // The same for a whole block (every row and column inside the cache) of consecutive rows:
    // unpredicated, from one base address per tensor.
    auto load_whole_kv_block = [&](int n, BlockRows const& rows) __attribute__((always_inline)) {
        kv_copy.load_async_full(smem_k + ring.stage(n) * kStageBytes, rows.k, args.k.row_stride);
        kv_copy.load_async_full(smem_v + ring.stage(n) * kStageBytes, rows.v, args.v.row_stride);
    };

    // Prologue. Every thread commits the same groups: Q's (loaded by warp 0), then one per stage of
    // its warp's first kStages - 1 blocks (empty past the range), so that the waits below count
    // alike in every warp.
    if (warp == 0) load_tile(loads.copy, tQ.g, tQ.s, tQc, column_ok, seq.q_len - m0);
    cp_async_fence();
    // (The whole-block kernels copy whole blocks as the loop does: only a sequence's last block may
    // be partial, and the predicated copy is ~4x the instructions, run once from a cold cache.)
    CUTE_UNROLL
    for (int i = 0; i < kStages - 1; ++i) {
        const int n = ring.prologue_block(i);
        if (n >= range.n_begin && kLoads != BlockLoads::predicated && seq.k_len - n * kBlockN >= kBlockN) {
            load_whole_kv_block(n, block_rows_of(n, cute::bool_constant<kLoads == BlockLoads::whole_paged>{}));
        } else if (n >= range.n_begin) {
            load_kv_block(n, pages_of(n));
        }
        cp_async_fence();
    }
    // Paged K/V: the page-table entries of this warp's first 32 blocks into L1, lane i the warp's
    // i-th block's. The loop reads each block's entry one step ahead of its copy, which covers an L1
    // hit but not a table line's first touch (a DRAM miss: a warp meets a new line every
    // 32 / kWarps blocks). With args.prefetch_pages (the planner says when), the lane reads its
    // entry and asks the L2 for the block's first line of K and of V instead.
    if (paged) {
        const int n = ring.top - lane * kWarps; // the warp's lane-th block
        if (n >= range.n_begin) {
            int page, row;
            page_divmod(page, row, int(seq.k_row0) + n * kBlockN);
            if (args.prefetch_pages) {
                const int64_t block = page_table.block(page);
                const Element* k_at = k_head + block * args.k.batch_stride + int64_t(row) * args.k.row_stride;
                const Element* v_at = v_head + block * args.v.batch_stride + int64_t(row) * args.v.row_stride;
                asm volatile("prefetch.global.L2 [%0];" ::"l"(k_at));
                asm volatile("prefetch.global.L2 [%0];" ::"l"(v_at));
            } else {
                asm volatile("prefetch.global.L1 [%0];" ::"l"(page_table.table_row + page));
            }
        }
    }
    // The first block the main loop fetches, looked up ahead (its page-table reads off the path
    // from a stage's release to its refill).
    Pages next_pages{};
    BlockRows next_rows{};
    cp_async_wait<kStages - 1>(); // Q has landed (the prologue's blocks may still be in flight) ...
    __syncthreads();              // ... for every warp: the only CTA barrier before the merge
    if constexpr (kQInRegisters) products.qk.load_a(q_regs);

    // One block of this warp; kMasked as in fwd_kernel (a compile-time tag: unmasked blocks carry no
    // mask instructions). The blocks the loop fetches are copied as the kernel's kLoads says: whole
    // blocks of consecutive rows (load_whole_kv_block) or predicated. Every block the loop fetches
    // lies before the sequence's last block (it is kStages - 1 steps below a warp's first block, and
    // the range's last block is warp 0's first), so only head_dim and the page alignment decide
    // (split_keys_loads). A kernel template argument, because ptxas otherwise if-converts the copies
    // and issues all of them. kTransform (ScoreTransform): whether the loop applies softcap / ALiBi.
    enum class ScoreTransform { never, always, when_asked };
    auto process_block = [&](int n, auto masked_tag, auto transform_tag) __attribute__((always_inline)) {
        constexpr bool kMasked = decltype(masked_tag)::value;
        constexpr ScoreTransform kTransform = decltype(transform_tag)::value;
        const int n0 = n * kBlockN;
        cp_async_wait<kStages - 2>(); // block n has landed for this thread ...
        __syncwarp();                 // ... and for the warp, which is also done with the stage of its
                                      // previous block, where block n - (kStages - 1) kWarps goes
        const int fetch = ring.fetched_during(n);
        if constexpr (kLoads != BlockLoads::predicated) {
            if (fetch >= range.n_begin) load_whole_kv_block(fetch, next_rows);
            cp_async_fence();
            next_rows = block_rows_of(ring.fetched_during(n - kWarps), // read during this block's math
                                      cute::bool_constant<kLoads == BlockLoads::whole_paged>{});
        } else {
            if (fetch >= range.n_begin) load_kv_block(fetch, next_pages);
            cp_async_fence();
            next_pages = pages_of(ring.fetched_during(n - kWarps)); // read during this block's math
        }

        Tensor acc_s = partition_fragment_C(tiled_mma, Shape<Int<kBlockM>, Int<kBlockN>>{});
        clear(acc_s);
        if constexpr (kQInRegisters) {
            products.qk.with_a(acc_s, q_regs, in_stage(products.qk.b, n));
        } else {
            products.qk(acc_s, products.qk.a, in_stage(products.qk.b, n));
        }

        Tensor scores = make_tensor(acc_s.data(), rows_cols(acc_s.layout()));
        if (kTransform == ScoreTransform::always || (kTransform == ScoreTransform::when_asked && args.transform_scores))
            apply_score_transform(scores, s_coords, args, alibi_slope, seq, m0, n0);
        if constexpr (kMasked) apply_key_mask(scores, s_coords, args.mask, seq, m0, n0);
        float correction[kRows];
        softmax.absorb_scores(scores, exp_scale, correction);
        OnlineSoftmax<kRows>::rescale_unless_all_one(acc_o_rows, correction);

        products.add_pv(acc_o, acc_s, in_stage(products.pv.b, n));
    };

    // As in fwd_kernel: the masked blocks sit at the two ends of the range.
    auto visit_blocks = [&](auto transform_tag) __attribute__((always_inline)) {
        if constexpr (kLoads == BlockLoads::predicated) {
            next_pages = pages_of(ring.fetched_during(ring.top));
        } else {
            next_rows = block_rows_of(ring.fetched_during(ring.top),
                                      cute::bool_constant<kLoads == BlockLoads::whole_paged>{});
        }
        for (int n = ring.top; n >= range.n_begin;) {
            for (; n >= range.n_begin && (n >= range.unmasked_end || n < range.unmasked_begin); n -= kWarps)
                process_block(n, cute::true_type{}, transform_tag);
            for (; n >= range.n_begin && n >= range.unmasked_begin && n < range.unmasked_end; n -= kWarps)
                process_block(n, cute::false_type{}, transform_tag);
        }
    };
    static_assert(kLoads == BlockLoads::predicated || kQInRegisters, "whole-block loops only up to d128");
    // The whole-block kernels keep softcap / ALiBi (~400 instructions of accurate tanh) out of the
    // loop that plain attention runs, which then fits in less instruction cache (Nsight Compute:
    // with it inside, the loop stalled on instruction fetch every 256 bytes). The predicated
    // kernel, the fallback, keeps one loop pair with a branch.
    using Transform = ScoreTransform;
    if constexpr (kLoads == BlockLoads::predicated) {
        visit_blocks(std::integral_constant<Transform, Transform::when_asked>{});
    } else if (args.transform_scores) {
        visit_blocks(std::integral_constant<Transform, Transform::always>{});
    } else {
        visit_blocks(std::integral_constant<Transform, Transform::never>{});
    }

    // The combine (a programmatic dependent on sm_90, dependent_launch.h) may be
    // launched once every CTA got here: its CTAs then take the SM slots of finished ones and wait for
    // the partials. (Allowed at the start, they took slots the main loop needed: that measured
    // that as mixed.)
    allow_dependent_launch();

    // Each warp's normalised O and lse (a warp that saw no allowed key: O = 0, lse = -inf; warp 0
    // of split 0 holds the sink).
    float row_lse[kRows];
    if (split == 0 && warp == 0) absorb_sinks(softmax, acc_o_rows, args, s_coords, h, packed, m0, seq.q_len, exp_scale);
    softmax.finish(acc_o_rows, exp_scale, 1.0f, row_lse);

    // The merge, over the rings (Q's buffer is left alone): lse (kWarps x kBlockM), then O (kWarps x
    // kBlockM x kMergeRowFloats).
    const int rows_valid = min(seq.q_len - m0, kBlockM);
    float* merge_lse = reinterpret_cast<float*>(smem + Warp::kSmemQElems * sizeof(Element));
    float* merge_o = merge_lse + kWarps * kBlockM;
    cp_async_wait<0>(); // (only empty groups are left)
    // Every warp is done with its ring; and whether any met a block table entry out of range.
    const bool faulted = __syncthreads_or(page_table.faulted) || seq.faulted;
    page_table.report(args.fault, b);
    {
        Tensor o_coords = accumulator_coords<kBlockM, kHeadDim>(mma_thr);
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
            const int row = get<0>(o_coords(r, 0));
            if (row >= rows_valid) continue;
            if (get<1>(o_coords(r, 0)) == 0) merge_lse[warp * kBlockM + row] = row_lse[r];
            float* o_row = merge_o + (warp * kBlockM + row) * Traits::kMergeRowFloats;
            CUTE_UNROLL
            for (int c = 0; c < size<1>(o_coords); c += 2) // neighbouring column pairs
                *reinterpret_cast<float2*>(o_row + get<1>(o_coords(r, c))) =
                    make_float2(acc_o_rows(r, c), acc_o_rows(r, c + 1));
        }
    }
    __syncthreads();

    // Merge by logsumexp (core/lse_merge.h, as the combine merges splits: log2 units, one ex2
    // instruction per term, where expf / logf would put a range reduction each into code that every
    // warp runs once, from a cold instruction cache) and write, 4 columns per thread and step: out
    // and lse, or this split's fp32 partials (split, batch, seqlen_q, heads, d) / (split, batch,
    // heads, seqlen_q).
    constexpr int kChunks = kHeadDim / 4;
    for (int index = tid; index < kBlockM * kChunks; index += Traits::kThreads) {
        const int row = index / kChunks, col = (index % kChunks) * 4;
        if (row >= rows_valid) break; // rows grow with index
        if (col >= args.head_dim) continue;
        float lse2_w[kWarps];
        CUTE_UNROLL
        for (int w = 0; w < kWarps; ++w) lse2_w[w] = merge_lse[w * kBlockM + row] * kLog2e;
        const float lse2 = merged_lse2(lse2_w);
        float lse = -INFINITY;
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (lse2 > -INFINITY) {
            lse = lse2 * kLn2;
            CUTE_UNROLL
            for (int w = 0; w < kWarps; ++w) {
                const float weight = LseSum::weight(lse2_w[w], lse2);
                const float4 part =
                    *reinterpret_cast<const float4*>(merge_o + (w * kBlockM + row) * Traits::kMergeRowFloats + col);
                o.x += weight * part.x;
                o.y += weight * part.y;
                o.z += weight * part.z;
                o.w += weight * part.w;
            }
        }
        if (faulted) { // an index of the sequence was out of range (device_faults.h): NaN, also in partials
            lse = __int_as_float(0x7fffffff);
            o = make_float4(lse, lse, lse, lse);
        }
        const int i = m0 + row;
        const int head = packed ? h + i : h, q_row = packed ? 0 : i;
        if (write_partials) {
            const int64_t at = ((int64_t(split) * args.batch + b) * args.seqlen_q + q_row) * args.num_heads + head;
            *reinterpret_cast<float4*>(args.out_accum + at * args.head_dim + col) = o;
            if (col == 0)
                args.lse_accum[((int64_t(split) * args.batch + b) * args.num_heads + head) * args.seqlen_q + q_row] =
                    lse;
        } else {
            auto pack = [](float lo, float hi) {
                return uint32_t(Element(lo).raw()) | uint32_t(Element(hi).raw()) << 16;
            };
            *reinterpret_cast<uint2*>(raw_pointer_cast(&mO(i, col))) = make_uint2(pack(o.x, o.y), pack(o.z, o.w));
            if (args.lse && col == 0) {
                const int64_t at = varlen ? int64_t(head) * args.total_q + seq.q_row0 + q_row
                                          : (int64_t(b) * args.num_heads + head) * args.seqlen_q + q_row;
                args.lse[at] = lse;
            }
        }
    }
#endif
}

} // namespace flashattn::cuda::kernels
