// The forward's inference path (inference.h): which problems take the inference variant of the
// SM80 kernel, how many K/V splits a call uses, the fp32 partial buffers and their combine.
//
// Split-KV (FlashAttention's "flash-decoding"): when the (query block, sequence, head) items cannot
// fill the GPU (decoding: one query row per sequence), each item's K/V blocks are shared by
// num_splits CTAs. Each writes its normalised O and its lse in fp32; combine.cu merges them by their
// logsumexp into out and softmax_lse. num_splits = 0 asks for the heuristic below.
//
// FLASHATTN_CUDA_DECODE (read per call, so that one process can time the variants) picks the
// kernel's tile and K/V load schedule (InferenceSchedule) and the split rule. Unset: tiles of at most
// 16 rows (decode: one query row, or the query heads of one KV head packed) run the split-keys
// decode kernel (16 query rows, the CTA's K/V blocks split across 4 warps, one-wave split rule;
// kernels/fwd_decode_kernel.cuh), which measured 1.2-1.45x the 64-row tile on the H200 and 99-104%
// of the copy bandwidth at batch 64 (session 5, docs/perf-log.md); taller tiles (seqlen_q > 16
// against a cache) run the forward kernel's inference variant, the 64-row tile with a ring of K/V
// stages and FlashAttention-2's split rule. The variants, for A/B timing: "tile64": the 64-row tile
// for every call (the default until session 5); "split_keys_deep": the split-keys kernel with 6
// stages, one CTA per SM; "narrow": the 16-row one-warp tile; "baseline": the 64-row tile with
// single K/V buffers; "wave_splits": the 64-row tile under a rule that aims at two waves of CTAs;
// "split_keys": the split-keys kernel for every call, tall tiles included (tests).
#include "inference.h"

#include "build_config.h"
#include "combine.h"
#include "dependent_launch.h"
#include "device_scope.h"
#include "inference_launch.h"
#include "tile_dim_dispatch.h"

#include "core/error.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace flashattn::cuda {
namespace {

// The variant of one call (FLASHATTN_CUDA_DECODE, above): a getenv, no allocation.
struct DecodeVariant {
    InferenceSchedule schedule = InferenceSchedule::pipelined;
    bool fa2_splits = true;
    bool forced = false; // FLASHATTN_CUDA_DECODE chose the schedule
};

// tile_rows: rows one tile must hold (the packed GQA heads, else seqlen_q). dropout: the split-keys
// kernel does not compile it (its per-block cost, fwd_decode_kernel.cuh), the 64-row tile does.
DecodeVariant decode_variant(int64_t tile_rows, bool dropout) {
    DecodeVariant v;
    const bool decode_rows = tile_rows <= 16; // one split-keys (or narrow) tile holds them
    if (decode_rows) v.schedule = InferenceSchedule::split_keys;
    if (const char* choice = std::getenv("FLASHATTN_CUDA_DECODE")) {
        v.forced = *choice != 0;
        if (std::strcmp(choice, "tile64") == 0) v.schedule = InferenceSchedule::pipelined;
        if (std::strcmp(choice, "narrow") == 0 && decode_rows) v.schedule = InferenceSchedule::narrow;
        if (std::strcmp(choice, "baseline") == 0) v.schedule = InferenceSchedule::single_buffer;
        if (std::strcmp(choice, "wave_splits") == 0) {
            v.schedule = InferenceSchedule::pipelined;
            v.fa2_splits = false;
        }
        if (std::strcmp(choice, "split_keys") == 0) v.schedule = InferenceSchedule::split_keys;
        if (std::strcmp(choice, "split_keys_deep") == 0) v.schedule = InferenceSchedule::split_keys_deep;
    }
    if (dropout && splits_keys(v.schedule)) v.schedule = InferenceSchedule::pipelined;
    return v;
}

template <InferenceSchedule kSchedule>
InferenceTiling tiling_of(int tile_dim, fa_dtype dtype) {
    return with_tile_dim(tile_dim, "inference", [&](auto d) {
        return dtype == FA_FLOAT16 ? inference_tiling<decltype(d)::value, FA_FLOAT16, kSchedule>()
                                   : inference_tiling<decltype(d)::value, FA_BFLOAT16, kSchedule>();
    });
}

InferenceTiling tiling_of(InferenceSchedule schedule, int tile_dim, fa_dtype dtype) {
    switch (schedule) {
        case InferenceSchedule::narrow: return tiling_of<InferenceSchedule::narrow>(tile_dim, dtype);
        case InferenceSchedule::single_buffer: return tiling_of<InferenceSchedule::single_buffer>(tile_dim, dtype);
        case InferenceSchedule::split_keys: return tiling_of<InferenceSchedule::split_keys>(tile_dim, dtype);
        case InferenceSchedule::split_keys_deep: return tiling_of<InferenceSchedule::split_keys_deep>(tile_dim, dtype);
        default: return tiling_of<InferenceSchedule::pipelined>(tile_dim, dtype);
    }
}

template <InferenceSchedule kSchedule>
void launch(int tile_dim, fa_dtype dtype, const FwdArgs& args, cudaStream_t stream) {
    with_tile_dim(tile_dim, "inference", [&](auto d) {
        if (dtype == FA_FLOAT16) {
            run_fwd_inference<decltype(d)::value, FA_FLOAT16, kSchedule>(args, stream);
        } else {
            run_fwd_inference<decltype(d)::value, FA_BFLOAT16, kSchedule>(args, stream);
        }
    });
}

void launch(InferenceSchedule schedule, int tile_dim, fa_dtype dtype, const FwdArgs& args, cudaStream_t stream) {
    switch (schedule) {
        case InferenceSchedule::narrow: return launch<InferenceSchedule::narrow>(tile_dim, dtype, args, stream);
        case InferenceSchedule::single_buffer:
            return launch<InferenceSchedule::single_buffer>(tile_dim, dtype, args, stream);
        case InferenceSchedule::split_keys: return launch<InferenceSchedule::split_keys>(tile_dim, dtype, args, stream);
        case InferenceSchedule::split_keys_deep:
            return launch<InferenceSchedule::split_keys_deep>(tile_dim, dtype, args, stream);
        default: return launch<InferenceSchedule::pipelined>(tile_dim, dtype, args, stream);
    }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int sm_count(int device) {
    int sms = 132;
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "querying the device");
    return sms;
}

// FlashAttention-2's rule: split only when the items fill less than 80% of the CTA slots, then take
// the fewest splits whose last wave is at least 85% as full as the best choice's. Split counts
// that give every split as many blocks as one split fewer would are skipped (same work, more
// combine traffic).
bool even_shares(int64_t n_blocks, int s) { return s == 1 || ceil_div(n_blocks, s) != ceil_div(n_blocks, s - 1); }

// How full the waves of items * s CTAs are on `slots` CTA slots (1: every wave full).
double wave_efficiency(int64_t items, int s, int64_t slots) {
    const double waves = double(items * s) / double(slots);
    return waves / double(ceil_div(items * s, slots));
}

int fa2_splits(int64_t items, int64_t n_blocks, int64_t slots) {
    if (items <= 0 || n_blocks <= 1 || double(items) >= 0.8 * double(slots)) return 1;
    const int max_splits = int(std::min<int64_t>({128, n_blocks, slots}));
    double best = 0.0;
    for (int s = 1; s <= max_splits; ++s)
        if (even_shares(n_blocks, s)) best = std::max(best, wave_efficiency(items, s, slots));
    for (int s = 1; s <= max_splits; ++s)
        if (even_shares(n_blocks, s) && wave_efficiency(items, s, slots) >= 0.85 * best) return s;
    return 1;
}

// Decode at small batch (batch x KV heads items, each a long run of K/V blocks): FlashAttention-2's
// rule stops at one wave of CTAs (batch 1, 8 KV heads, 2 CTAs per SM: 29-33 splits), where the
// measured read rate was half the large-batch rate. Here: up to about kTargetWaves waves, so that
// when one CTA of an SM starts or ends (pipeline fill, partial write) others are mid-stream; each
// split at least kMinBlocksPerSplit blocks (less would leave the ring of K/V stages nothing to
// overlap); equal shares (the fewest splits with the same blocks per split); and, past one wave, a
// last wave at least 85% full. The combine reads splits x (d + 1) floats per query head: 1 MB at
// batch 1, 64 splits, 32 heads.
constexpr int64_t kTargetWaves = 2;
constexpr int64_t kMinBlocksPerSplit = 2;

int wave_splits(int64_t items, int64_t n_blocks, int64_t slots) {
    if (items <= 0 || n_blocks <= 1 || double(items) >= 0.8 * double(slots)) return 1;
    const int64_t wanted = ceil_div(kTargetWaves * slots, items);
    const int max_splits = int(std::clamp<int64_t>(std::min(wanted, n_blocks / kMinBlocksPerSplit), 1, 128));
    for (int s = max_splits; s > 1; --s) {
        const bool one_wave = items * s <= slots; // every CTA runs at once: more splits, more in flight
        if (even_shares(n_blocks, s) && (one_wave || wave_efficiency(items, s, slots) >= 0.85)) return s;
    }
    return 1;
}

// The split-keys decode kernel's rule: split only when the items
// fill less than 80% of the CTA slots, like FlashAttention-2, then take as many splits as fill one
// wave (FlashAttention-2's rule takes the fewest within 85% of the best wave, e.g. 29 of 33 at
// batch 1, 8 KV heads, two CTAs per SM: 12% of the slots idle; combine.cu now loads 16 splits at a
// time, so the extra splits cost little), each split at least kSplitKeysMinBlocks blocks (one per
// warp: on short caches parallelism matters more than each warp's pipeline), equal shares.
// split_below: the item count from which it does not split: 0.8 x the CTA slots when each split
// would still hold kLongSplitKeys keys, else 0.8 x the SM count. Batch 16 with 8 KV heads (128
// items, one CTA per SM unsplit): at 1k the unsplit call is faster (contiguous 2.28 vs 1.90 TB/s,
// paged 2.07 vs 1.84, session 7 run 1: the combine is a fifth of a 25 us call); from 8k two splits
// are, paged caches by far (unsplit, their page-table lookups leave too little in flight: 8k 3.67
// -> 3.11, 32k 4.18 -> 3.32), contiguous ones slightly (8k 3.83 -> 3.91-3.97, 32k 4.17-4.25 ->
// 4.33-4.36, session 8 runs 2-3 with the two-round combine).
constexpr int64_t kSplitKeysMinBlocks = 4;
constexpr int64_t kLongSplitKeys = 4096;

int one_wave_splits(int64_t items, int64_t n_blocks, int64_t slots, double split_below) {
    if (items <= 0 || n_blocks <= 1 || double(items) >= split_below) return 1;
    int s = int(std::clamp<int64_t>(std::min(slots / items, n_blocks / kSplitKeysMinBlocks), 1, 128));
    while (s > 1 && !even_shares(n_blocks, s)) --s;
    return s;
}

// Contiguous KV-cache decode runs one CTA per item, unsplit, from this fraction of the SM count up to
// the SM count (plan_inference says why).
constexpr double kUnsplitFromSms = 0.6;

// The partial buffers of one split, at most this large (fewer splits beyond).
constexpr int64_t kMaxAccumBytes = int64_t(1) << 30;

} // namespace

InferencePlan plan_inference(const Problem& problem, int head_dim, int tile_dim, int device) {
    const fa_fwd_params& p = problem.p;
    const KvLayout& kv = problem.kv;
    const bool kvcache = kv.cache_seqlens != nullptr;
    const bool special_layout = kv.paged() || kvcache;
    InferencePlan plan;
    if (!special_layout && p.num_splits == 1) return plan;

    // GQA packing: one query row per sequence, so the tile's rows are the heads sharing a KV head.
    // Per-head ALiBi slopes and dropout's per-(head, row) stream would need a head per row; those
    // rare combinations run unpacked.
    plan.pack_gqa = !problem.varlen && p.seqlen_q == 1 && problem.group > 1 && !p.alibi_slopes &&
                    !problem.has_dropout();
    DecodeVariant variant = decode_variant(plan.pack_gqa ? problem.group : p.seqlen_q, problem.has_dropout());
    InferenceTiling tiling = tiling_of(variant.schedule, tile_dim, p.dtype);
    const int sms = sm_count(device); // (asked once: the split rule and the prefetch gate use it)

    // Splits serve dense queries (varlen batches have many rows; attn_probs is for tests).
    const int64_t rows = int64_t(p.batch) * p.seqlen_q * p.num_heads; // output rows, each split's partials
    int splits = 1;
    // A split's CTAs: query tiles x batch x heads (packed: KV heads).
    auto items_of = [&](const InferenceTiling& t) {
        const int64_t tile_rows = plan.pack_gqa ? problem.group : p.seqlen_q;
        const int64_t grid_heads = plan.pack_gqa ? p.num_heads_k : p.num_heads;
        return ceil_div(tile_rows, t.block_m) * p.batch * grid_heads;
    };
    if (!problem.varlen && !p.attn_probs && p.num_splits != 1) {
        const int64_t items = items_of(tiling);
        const int64_t n_blocks = ceil_div(p.seqlen_k, tiling.block_n); // the longest a sequence can be
        if (p.num_splits > 1) {
            splits = int(std::clamp<int64_t>(p.num_splits, 1, std::clamp<int64_t>(n_blocks, 1, 128)));
        } else {
            const int64_t slots = int64_t(sms) * tiling.ctas_per_sm;
            // FLASHATTN_CUDA_DECODE_SPLIT_BELOW=slots / =sms: one of the two for every cache (A/B
            // timing of the rule; read per call).
            const char* below = std::getenv("FLASHATTN_CUDA_DECODE_SPLIT_BELOW");
            const int64_t one_wave = std::max<int64_t>(1, slots / std::max<int64_t>(1, items));
            bool below_slots = p.seqlen_k / one_wave >= kLongSplitKeys;
            if (below && std::strcmp(below, "slots") == 0) below_slots = true;
            if (below && std::strcmp(below, "sms") == 0) below_slots = false;
            const double split_below = 0.8 * double(below_slots ? slots : sms);
            splits = splits_keys(variant.schedule) ? one_wave_splits(items, n_blocks, slots, split_below)
                     : variant.fa2_splits          ? fa2_splits(items, n_blocks, slots)
                                                   : wave_splits(items, n_blocks, slots);
            // Items that fill most of the SMs once (batch 16 with 8 KV heads: 128 on 132; batch 10:
            // 80) but would be split in two for a second CTA per SM read a contiguous cache faster
            // unsplit, one CTA per item on the 3-stage ring, and save the combine. H200, session 14
            // (bench/decode_sm_probe.py, TB/s, 4 query heads per KV head): 96 items 3.76 (two
            // splits) -> 4.14 at 8k, 2.21 -> 2.65 at 1k; 108 items 3.88 (the deep ring, the rule
            // until then from 0.8 x the SMs) -> 4.20 at 8k, 4.12 -> 4.45 at 32k; 128 items equal or
            // better than the deep ring (1k 2.87 -> 2.98, 32k 4.46 -> 4.51): cuDNN's rates at 80-128
            // items. Fewer rings in flight read the saturated HBM better: the deep ring keeps 20
            // blocks in flight per SM, this one 8. At 64 items (1k, 8k) splitting and both unsplit
            // rings were within 5% of each other, so the split rule keeps them.
            // (Paged caches at batch 16 measured slower unsplit on the deep ring at every length in
            // sessions 9 and 10, e.g. 8k 3.91 against 4.11 TB/s, and keep two splits.)
            // FLASHATTN_CUDA_DECODE_UNSPLIT=deep: the rule before session 14 (the deep ring from 0.8
            // x the SMs), for A/B timing; read per call.
            const char* unsplit = std::getenv("FLASHATTN_CUDA_DECODE_UNSPLIT");
            const bool deep_rule = unsplit && std::strcmp(unsplit, "deep") == 0;
            if (variant.schedule == InferenceSchedule::split_keys && !variant.forced && kvcache && !kv.paged() && splits > 1 &&
                double(items) >= (deep_rule ? 0.8 : kUnsplitFromSms) * double(sms) && items <= sms) {
                if (deep_rule) {
                    variant.schedule = InferenceSchedule::split_keys_deep;
                    tiling = tiling_of(variant.schedule, tile_dim, p.dtype);
                }
                splits = 1;
            }
        }
        while (splits > 1 && splits * rows * (head_dim + 1) * int64_t(sizeof(float)) > kMaxAccumBytes) --splits;
    }
    if (!special_layout && splits == 1) return plan;

    plan.runs = true;
    plan.device = device;
    plan.schedule = variant.schedule;
    plan.tiling = tiling;
    plan.splits = splits;
    // Paged caches on grids of at most one CTA per SM (1k x 16: 128 CTAs of 4 warps, each warp with
    // two blocks in flight): each warp starts the DRAM reads of its first 32 blocks early, one line
    // of K and V each (fwd_decode_kernel.cuh). H200, session 11 run 5: 1k x 16 paged 2.55 -> 2.68
    // TB/s; on fuller grids it cost up to 5% (run 4: 8k x 1, 264 CTAs, 1.75 -> 1.67), so only there.
    // FLASHATTN_CUDA_DECODE_PREFETCH_PAGES=0 / =1: never / on every paged grid (A/B timing).
    if (kv.paged() && splits_keys(variant.schedule)) {
        plan.prefetch_pages = items_of(tiling) * splits <= sms;
        if (const char* choice = std::getenv("FLASHATTN_CUDA_DECODE_PREFETCH_PAGES"))
            plan.prefetch_pages = std::strcmp(choice, "0") != 0;
    }
    // Partials: out (split, batch, seqlen_q, heads, head_dim) and lse (split, batch, heads, seqlen_q).
    plan.partial_out_bytes = splits > 1 ? size_t(splits * rows * head_dim) * sizeof(float) : 0;
    plan.partial_lse_bytes = splits > 1 ? size_t(splits * rows) * sizeof(float) : 0;
    return plan;
}

void run_inference_forward(const Problem& problem, const InferencePlan& plan, FwdArgs args, int tile_dim,
                           Workspace& workspace, cudaStream_t stream) {
    const fa_fwd_params& p = problem.p;
    const KvLayout& kv = problem.kv;
    const int splits = plan.splits;
    if (kv.paged() && p.attn_probs)
        fail(FA_ERROR_UNSUPPORTED, "attn_probs with a block_table is not supported by the CUDA backend");
    require_on_device(kv.block_table, plan.device, "block_table");
    require_on_device(kv.cache_seqlens, plan.device, "cache_seqlens");
    require_on_device(kv.cache_batch_idx, plan.device, "cache_batch_idx");
    require_on_device(kv.cache_leftpad, plan.device, "cache_leftpad");
    if (p.seqlen_k > INT32_MAX - 4 * plan.tiling.block_n)
        fail(FA_ERROR_UNSUPPORTED, "seqlen_k ", p.seqlen_k, " is too large for the CUDA inference kernel");

    args.pack_gqa = plan.pack_gqa;
    args.prefetch_pages = plan.prefetch_pages;
    args.block_table = kv.block_table;
    args.block_table_stride = kv.block_table_stride;
    args.page_size = int32_t(kv.page_size);
    args.num_blocks = int32_t(kv.num_blocks);
    args.cache_seqlens = kv.cache_seqlens;
    args.cache_batch_idx = kv.cache_batch_idx;
    args.cache_leftpad = kv.cache_leftpad;
    args.seqlen_new = int32_t(kv.seqlen_new);
    args.cache_entries = int32_t(kv.cache_entries);
    args.num_splits = splits;
    args.out_accum = static_cast<float*>(workspace.take(plan.partial_out_bytes));
    args.lse_accum = static_cast<float*>(workspace.take(plan.partial_lse_bytes));

    launch(plan.schedule, tile_dim, p.dtype, args, stream);

    if (splits > 1) {
        const int64_t d = args.head_dim, heads = p.num_heads, sq = p.seqlen_q;
        CombineArgs c{};
        c.num_splits = splits;
        c.batch = p.batch;
        c.rows = sq;
        c.heads = heads;
        c.head_dim = int32_t(d);
        c.partial = args.out_accum;
        c.partial_split_stride = p.batch * sq * heads * d;
        c.partial_batch_stride = sq * heads * d;
        c.partial_row_stride = heads * d;
        c.partial_head_stride = d;
        c.lse_partial = args.lse_accum;
        c.lse_split_stride = p.batch * heads * sq;
        c.lse_batch_stride = heads * sq;
        c.lse_head_stride = sq;
        c.lse_row_stride = 1;
        c.out = args.out.data;
        c.out_dtype = p.dtype;
        c.out_batch_stride = args.out.batch_stride;
        c.out_row_stride = args.out.row_stride;
        c.out_head_stride = args.out.head_stride;
        c.lse = args.lse; // (batch, heads, seqlen_q), or none
        c.lse_out_batch_stride = heads * sq;
        c.lse_out_head_stride = sq;
        c.lse_out_row_stride = 1;
        // The combine as a programmatic dependent of the split-keys kernel on sm_90
        // (dependent_launch.h; FLASHATTN_CUDA_PDL=0: a plain launch).
        launch_combine(c, stream, splits_keys(plan.schedule) && dependent_launch_available(plan.device),
                       /*every_split_allocated=*/true);
    }
}

} // namespace flashattn::cuda
