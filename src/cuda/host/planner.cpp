// The planner (planner.h). Plain C++: no CUDA header, so that it builds and is tested everywhere.
#include "host/planner.h"

#include "core/error.h"
#include "kernels/tiles.h"

#include <algorithm>
#include <cmath>
#include <climits>
#include <cstdint>
#include <string>

namespace flashattn::cuda {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t round_up8(int64_t x) { return (x + 7) / 8 * 8; }

// The kernels read and write 16-byte chunks: base addresses 16-byte aligned, strides and the head
// dim multiples of 8 elements.
bool chunk_aligned(const fa_tensor& t, bool has_batch) {
    const auto aligned = [](int64_t stride) { return stride % 8 == 0; };
    return reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && aligned(t.row_stride) && aligned(t.head_stride) &&
           (!has_batch || aligned(t.batch_stride));
}

// A per-tile-dim occupancy table of DeviceInfo at `tile_dim` (at least 1).
int occupancy(const std::vector<int>& table, const DeviceInfo& device, int tile_dim) {
    for (size_t i = 0; i < device.tile_dims.size() && i < table.size(); ++i)
        if (device.tile_dims[i] == tile_dim) return std::max(table[i], 1);
    return 1;
}

// (The dtype is checked by each plan first: an empty forward returns before this.)
void require_runnable(const DeviceInfo& device, const fa_fwd_params& p) {
    if (device.cc_major < 8)
        fail(FA_ERROR_UNSUPPORTED, "the CUDA backend needs compute capability 8.0 or newer; this device is ",
             device.cc_major, ".", device.cc_minor);
    // Row indices inside the kernels are 32-bit (offsets are 64-bit); keep a block's worth of headroom.
    if (p.seqlen_q > INT_MAX - 256 || p.seqlen_k > INT_MAX - 256)
        fail(FA_ERROR_UNSUPPORTED, "seqlen_q/seqlen_k above 2^31-257 are not supported by the CUDA backend");
}

// ---------------------------------------------------------------------------------------------
// Forward: the training kernels.

// The order of a masked forward's tiles (kernels/tile_order.cuh): sections of (sequence, head) pairs
// whose K/V takes about 16 MB of L2, heaviest query blocks first within a section (H200: 4-12% on
// causal shapes over per-pair heaviest-first; 8 and 32 MB sections measured about the same). Where
// each tile is its own CTA (the Hopper grid with O wider than 128 columns, not persistent), a section
// holds at most 16 pairs. GQA divides a pair's share of K/V by the group, which gave d256 32/4 at
// 1-2k sections of 64-128 pairs; 8-16 measured 3-6% faster there, 1% at 4k (H100). d256 MHA's
// 16 MB sections are already 16 pairs or fewer from 1k keys, and measured best.
int section_heads(const Problem& problem, int head_dim, int head_dim_v, int block_m, bool tile_per_cta) {
    const fa_fwd_params& p = problem.p;
    const int64_t pairs = int64_t(p.batch) * p.num_heads;
    if (!problem.mask.is_local() || p.seqlen_q <= block_m || pairs <= 1) return 0; // equal work per block
    constexpr double kSectionBytes = 16.0 * 1024 * 1024;
    constexpr double kTilePerCtaMaxHeads = 16.0;
    const double kv_bytes = double(p.seqlen_k) * double(head_dim + head_dim_v) * 2.0 / double(problem.group);
    double heads = kSectionBytes / (kv_bytes > 1.0 ? kv_bytes : 1.0);
    if (tile_per_cta) heads = std::min(heads, kTilePerCtaMaxHeads);
    return int(heads < 1.0 ? 1 : heads > double(pairs) ? double(pairs) : heads);
}

Staging forward_staging(const Problem& problem, bool value_width);

// The value head dim of a Hopper forward instance that serves these widths natively (V and O at
// their own width: P V, O's registers and its store a third smaller at 192 / 128, v and out read and
// written in place): tiles::forward_sm90_value_dim(tile_dim) where q and k are exactly the tile head
// dim and v exactly that value head dim, else 0 (the pair runs at the wider width, staged).
int sm90_value_dim(const Staging& s, int tile_dim) {
    const int value_dim = tiles::forward_sm90_value_dim(tile_dim);
    return value_dim != 0 && s.qk_dim == tile_dim && s.v_dim == value_dim ? value_dim : 0;
}

// On compute capability 9.0 the Hopper kernel, except at d <= 64 with at most 512 keys, where the
// mma.sync kernel (two CTAs per SM, one's prologue under the other's loop) measured 5-10% faster.
// The kernel and its tile; the grid is training_forward_grid's.
void choose_training_forward(const Problem& problem, const DeviceInfo& device, const Overrides& overrides,
                             ForwardPlan& plan) {
    const fa_fwd_params& p = problem.p;
    bool sm90 = false;
    if (!device.hopper()) {
        plan.rejected.add(Kernel::forward_sm90, "needs compute capability 9.0");
    } else if (!device.sm90_kernels) {
        plan.rejected.add(Kernel::forward_sm90, "this build has no sm_90a kernels (FLASHATTN_CUDA_ARCHS)");
    } else if (overrides.forward_kernel == KernelChoice::sm80) {
        plan.rejected.add(Kernel::forward_sm90, "overrides: forward_kernel=sm80");
    } else if (overrides.forward_kernel == KernelChoice::automatic && plan.tile_dim <= 64 && p.seqlen_k <= 512) {
        plan.rejected.add(Kernel::forward_sm90, "d <= 64 with <= 512 keys: the mma.sync kernel measured faster");
    } else {
        sm90 = true;
    }
    if (sm90) plan.rejected.add(Kernel::forward_sm80, "the sm90 kernel serves this call");
    plan.kernel = sm90 ? Kernel::forward_sm90 : Kernel::forward_sm80;
    if (sm90) {
        if (const int value_dim = sm90_value_dim(plan.staging, plan.tile_dim)) {
            plan.staging = forward_staging(problem, true);
            plan.tile_dim_v = value_dim;
        }
        const tiles::ForwardSm90 tile = tiles::forward_sm90(plan.tile_dim, plan.tile_dim_v);
        plan.block_m = tile.block_m, plan.block_n = tile.block_n;
    } else {
        const tiles::ForwardSm80 tile = tiles::forward_sm80(plan.tile_dim);
        plan.block_m = tile.block_m, plan.block_n = tile.block_n;
    }
}

// The training forward's grid (and the tile counter of a persistent, masked one).
void training_forward_grid(const Problem& problem, const DeviceInfo& device, ForwardPlan& plan) {
    const fa_fwd_params& p = problem.p;
    const bool sm90 = plan.kernel == Kernel::forward_sm90;
    plan.num_m_blocks = int(ceil_div(p.seqlen_q, plan.block_m));
    // Persistent (a CTA per SM looping over tiles: the next tile's Q and K/V arrive under the
    // epilogue) measured 1-8% faster without a mask. Under a causal or local mask the tiles do
    // unequal work, and a grid stride hands some SMs twice the others' (d256 causal 16k: 342
    // against 533 TFLOP/s), so there the CTAs claim their tiles from a counter, heaviest first
    // (an SM that drew light tiles claims more). So do tiles that end past their sequence
    // (varlen, or seqlen_q not a multiple of the tile): their consumers without rows pass, and
    // in a grid stride the short tiles fall to the same few CTAs whenever the tiles per pair
    // divide the CTAs (d64 at 1k: 6 tiles a pair on 132 SMs, every sixth CTA all of the last
    // ones). Where O is at most 128 columns (d <= 128, 192 / 128): above, the looping form does
    // not fit its registers, and one CTA per tile is dispatched by the hardware as SMs free up.
    plan.sm90_persistent = sm90 && tiles::forward_sm90(plan.tile_dim, plan.tile_dim_v).can_persist;
    plan.section_heads = section_heads(problem, plan.head_dim, plan.head_dim_v, plan.block_m,
                                       sm90 && !plan.sm90_persistent);
    const int64_t tiles_total = int64_t(plan.num_m_blocks) * p.batch * p.num_heads;
    plan.ctas = tiles_total;
    if (sm90) {
        const bool ragged = problem.varlen || p.seqlen_q % plan.block_m != 0;
        plan.sm90_claims_tiles = plan.sm90_persistent && (problem.mask.is_local() || ragged);
        if (plan.sm90_persistent) plan.ctas = std::min<int64_t>(tiles_total, device.sm_count);
        plan.workspace.add(Piece::tile_counter, plan.sm90_claims_tiles ? sizeof(unsigned) : 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Forward: the inference kernels (paged K/V, a KV cache, split-KV).

// FlashAttention-2's split rule: split only when the items fill less than 80% of the CTA slots,
// then take the fewest splits whose last wave is at least 85% as full as the best choice's. Split
// counts that give every split as many blocks as one split fewer would are skipped.
bool even_shares(int64_t n_blocks, int s) { return s == 1 || ceil_div(n_blocks, s) != ceil_div(n_blocks, s - 1); }

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

// The decode kernel's rule: split only when the items fill less than 80% of the CTA slots (of the
// SMs, when a split would hold fewer than kLongSplitKeys keys: on short caches the combine costs
// more than a second CTA per SM gains), then as many splits as fill one wave (the combine loads many
// splits at once, so extra splits cost little), each split at least kSplitKeysMinBlocks blocks (one
// per warp), equal shares.
constexpr int64_t kSplitKeysMinBlocks = 4;
constexpr int64_t kLongSplitKeys = 4096;

int one_wave_splits(int64_t items, int64_t n_blocks, int64_t slots, double split_below) {
    if (items <= 0 || n_blocks <= 1 || double(items) >= split_below) return 1;
    int s = int(std::clamp<int64_t>(std::min(slots / items, n_blocks / kSplitKeysMinBlocks), 1, 128));
    while (s > 1 && !even_shares(n_blocks, s)) --s;
    return s;
}

// Contiguous KV caches whose items fill 0.6-1.0 x the SMs read faster unsplit, one CTA per item on
// the decode kernel's ring, than in two splits (H200: 96 items 3.76 -> 4.14 TB/s at 8k; cuDNN's
// rates at 80-128 items); paged caches measured slower unsplit and keep their splits.
constexpr double kUnsplitFromSms = 0.6;

// The partials of all splits, at most this large (fewer splits beyond).
constexpr int64_t kMaxPartialBytes = int64_t(1) << 30;

DecodeLoads decode_loads(const Problem& problem, int head_dim, int tile_dim, int block_n) {
    if (tile_dim > 128 || head_dim != tile_dim) return DecodeLoads::predicated;
    if (!problem.kv.paged()) return DecodeLoads::whole_contiguous;
    // (Left padding may start a sequence inside a block.)
    const bool whole_pages = problem.kv.page_size % block_n == 0 && !problem.kv.cache_leftpad;
    return whole_pages ? DecodeLoads::whole_paged : DecodeLoads::predicated;
}

// Whether the inference kernels serve the call (paged K/V, a KV cache, or a split of the keys) and
// how; false: the training kernels do.
bool plan_inference(const Problem& problem, const DeviceInfo& device, const Overrides& overrides, ForwardPlan& plan) {
    const fa_fwd_params& p = problem.p;
    const KvLayout& kv = problem.kv;
    const bool kvcache = kv.cache_seqlens != nullptr;
    const bool special_layout = kv.paged() || kvcache;
    if (!special_layout && p.num_splits == 1) return false;

    // GQA packing: one query row per sequence, so the tile's rows are the heads sharing a KV head.
    // Per-head ALiBi slopes and dropout's per-(head, row) stream would need a head per row.
    const bool pack_gqa = !problem.varlen && p.seqlen_q == 1 && problem.group > 1 && !p.alibi_slopes &&
                          !problem.has_dropout();
    const int64_t tile_rows = pack_gqa ? problem.group : p.seqlen_q;
    // Decode tiles (at most 16 rows) run the decode kernel, which measured 1.2-1.45x the 64-row tile;
    // it has no dropout (~200 predicated instructions per block in a kernel bound by instruction issue).
    bool decode = tile_rows <= tiles::kDecodeRows;
    const bool forced = overrides.inference_kernel != InferenceChoice::automatic;
    if (overrides.inference_kernel == InferenceChoice::tile64) decode = false;
    if (overrides.inference_kernel == InferenceChoice::split_keys) decode = true;
    const char* why_not_other = forced ? (decode ? "overrides: inference_kernel=split_keys" : "overrides: inference_kernel=tile64")
                                       : (decode ? "a decode tile (<= 16 rows): the decode kernel serves it"
                                                 : "tiles taller than 16 rows");
    if (decode && problem.has_dropout()) {
        decode = false;
        why_not_other = "dropout: the decode kernel has none";
    }
    int block_m, block_n, ctas_per_sm;
    if (decode) {
        const tiles::Decode tile = tiles::decode(plan.tile_dim);
        block_m = tile.block_m, block_n = tile.block_n;
        ctas_per_sm = occupancy(device.decode_ctas_per_sm, device, plan.tile_dim);
    } else {
        const tiles::Inference tile = tiles::inference(plan.tile_dim);
        block_m = tile.block_m, block_n = tile.block_n;
        ctas_per_sm = occupancy(device.inference_ctas_per_sm, device, plan.tile_dim);
    }
    const int64_t grid_heads = pack_gqa ? p.num_heads_k : p.num_heads;
    const int64_t items = ceil_div(tile_rows, block_m) * p.batch * grid_heads; // CTAs of one split
    const int64_t rows = int64_t(p.batch) * p.seqlen_q * p.num_heads;          // output rows, each split's partials

    // Splits serve dense queries (varlen batches have many rows; attn_probs is for tests). The
    // heuristic (num_splits 0) keeps dropout unsplit, as flash_attn does.
    int splits = 1;
    if (!problem.varlen && !p.attn_probs && p.num_splits != 1 && !(p.num_splits == 0 && problem.has_dropout())) {
        const int64_t n_blocks = ceil_div(p.seqlen_k, block_n); // the longest a sequence can be
        if (p.num_splits > 1) {
            splits = int(std::clamp<int64_t>(p.num_splits, 1, std::clamp<int64_t>(n_blocks, 1, 128)));
        } else {
            const int sms = device.sm_count;
            const int64_t slots = int64_t(sms) * ctas_per_sm;
            if (decode) {
                const int64_t one_wave = std::max<int64_t>(1, slots / std::max<int64_t>(1, items));
                const bool long_splits = p.seqlen_k / one_wave >= kLongSplitKeys;
                splits = one_wave_splits(items, n_blocks, slots, 0.8 * double(long_splits ? slots : sms));
                if (!forced && kvcache && !kv.paged() && splits > 1 && double(items) >= kUnsplitFromSms * sms &&
                    items <= sms)
                    splits = 1;
            } else {
                splits = fa2_splits(items, n_blocks, slots);
            }
        }
        while (splits > 1 && splits * rows * (plan.head_dim + 1) * int64_t(sizeof(float)) > kMaxPartialBytes) --splits;
    }
    if (!special_layout && splits == 1) {
        plan.rejected.add(Kernel::inference, "plain K/V in one split: the training kernels serve it");
        plan.rejected.add(Kernel::decode, "plain K/V in one split: the training kernels serve it");
        return false;
    }
    plan.rejected.add(decode ? Kernel::inference : Kernel::decode, why_not_other);

    plan.kernel = decode ? Kernel::decode : Kernel::inference;
    plan.block_m = block_m, plan.block_n = block_n;
    plan.splits = splits;
    plan.pack_gqa = pack_gqa;
    plan.num_m_blocks = int(ceil_div(tile_rows, block_m));
    plan.ctas = items * splits;
    if (decode) {
        plan.decode_loads = decode_loads(problem, plan.head_dim, plan.tile_dim, block_n);
        // Paged caches on grids of at most one CTA per SM: each warp starts the DRAM reads of its
        // first blocks early (H200: 1k x 16 paged 2.55 -> 2.68 TB/s; on fuller grids it cost up to 5%).
        plan.prefetch_pages = kv.paged() && plan.ctas <= device.sm_count;
        plan.dependent_combine = splits > 1 && device.cc_major >= 9;
    }
    plan.rejected.add(Kernel::forward_sm80, special_layout ? "paged K/V or a KV cache: the inference kernels"
                                                           : "split-KV: the inference kernels");
    plan.rejected.add(Kernel::forward_sm90, special_layout ? "paged K/V or a KV cache: the inference kernels"
                                                           : "split-KV: the inference kernels");
    return true;
}

// The widths of a problem's tensors and those the kernels run at (Staging): one for all four, the
// wider rounded up to 8, or with value_width (a kernel with a value head dim of its own, whose two
// widths the caller has checked) q/k and v/out each at their own.
void set_widths(const Problem& problem, Staging& s, bool value_width = false) {
    s.qk_dim = int(problem.head_dim());
    s.v_dim = int(problem.head_dim_v());
    s.padded_dim = value_width ? s.qk_dim : int(round_up8(std::max(s.qk_dim, s.v_dim)));
    s.padded_dim_v = value_width ? s.v_dim : s.padded_dim;
    s.pad_head_dim = s.qk_dim != s.padded_dim || s.v_dim != s.padded_dim_v;
}

Staging forward_staging(const Problem& problem, bool value_width) {
    const fa_fwd_params& p = problem.p;
    const bool varlen = problem.varlen, paged = problem.kv.paged();
    Staging s;
    s.dense_batch = varlen ? 1 : p.batch;
    s.q_rows = varlen ? problem.total_q : p.seqlen_q;
    s.kv_batch = paged ? p.num_blocks : problem.kv.cache_entries ? problem.kv.cache_entries : s.dense_batch;
    s.k_rows = paged ? p.page_size : varlen ? p.total_k : p.seqlen_k;
    s.kv_has_batch = paged || !varlen;
    set_widths(problem, s, value_width);
    const bool pad_qk = s.qk_dim != s.padded_dim, pad_v = s.v_dim != s.padded_dim_v;
    s.q = pad_qk || !chunk_aligned(p.q, !varlen);
    s.k = s.k_rows > 0 && (pad_qk || !chunk_aligned(p.k, s.kv_has_batch));
    s.v = s.k_rows > 0 && (pad_v || !chunk_aligned(p.v, s.kv_has_batch));
    s.out = pad_v || !chunk_aligned(p.out, !varlen);
    return s;
}

size_t staged_bytes(int64_t batch, int64_t rows, int64_t heads, int padded_dim) {
    return size_t(batch * rows * heads * padded_dim * 2);
}

} // namespace

const char* kernel_name(Kernel kernel) {
    switch (kernel) {
        case Kernel::forward_sm80: return "forward_sm80";
        case Kernel::forward_sm90: return "forward_sm90";
        case Kernel::inference: return "inference";
        case Kernel::decode: return "decode";
        case Kernel::backward_sm80: return "backward_sm80";
        case Kernel::backward_sm90: return "backward_sm90";
    }
    return "?";
}

int tile_head_dim(const DeviceInfo& device, int head_dim) {
    for (const int compiled : device.tile_dims)
        if (head_dim <= compiled) return compiled;
    std::string built;
    for (const int compiled : device.tile_dims) built += (built.empty() ? "" : ";") + std::to_string(compiled);
    fail(FA_ERROR_UNSUPPORTED, "head_dim ", head_dim, " has no CUDA kernel in this build (FLASHATTN_HEADDIMS=", built,
         "); rebuild with a head dim >= ", head_dim);
}

ForwardPlan plan_forward(const Problem& problem, const DeviceInfo& device, const Overrides& overrides) {
    const fa_fwd_params& p = problem.p;
    ForwardPlan plan;
    require(p.dtype == FA_FLOAT16 || p.dtype == FA_BFLOAT16, "dtype must be FA_FLOAT16 or FA_BFLOAT16 on CUDA");
    if (problem.total_q == 0) {
        plan.empty = true;
        return plan;
    }
    require_runnable(device, p);
    plan.staging = forward_staging(problem, false);
    plan.head_dim = plan.staging.pad_head_dim ? plan.staging.padded_dim : p.head_dim;
    plan.tile_dim = plan.tile_dim_v = tile_head_dim(device, plan.head_dim);
    const bool inference = plan_inference(problem, device, overrides, plan);
    if (!inference) choose_training_forward(problem, device, overrides, plan); // may stage at the value width
    const Staging& s = plan.staging;
    plan.head_dim_v = s.pad_head_dim ? s.padded_dim_v : s.v_dim;

    WorkspaceLayout& w = plan.workspace;
    w.add(Piece::q, s.q ? staged_bytes(s.dense_batch, s.q_rows, p.num_heads, s.padded_dim) : 0);
    w.add(Piece::k, s.k ? staged_bytes(s.kv_batch, s.k_rows, p.num_heads_k, s.padded_dim) : 0);
    w.add(Piece::v, s.v ? staged_bytes(s.kv_batch, s.k_rows, p.num_heads_k, s.padded_dim_v) : 0);
    w.add(Piece::out, s.out ? staged_bytes(s.dense_batch, s.q_rows, p.num_heads, s.padded_dim_v) : 0);
    w.add(Piece::lse, p.attn_probs && !p.softmax_lse ? size_t(p.num_heads) * problem.total_q * sizeof(float) : 0);

    if (inference) {
        if (problem.kv.paged() && p.attn_probs)
            fail(FA_ERROR_UNSUPPORTED, "attn_probs with a block_table is not supported by the CUDA backend");
        if (p.seqlen_k > INT32_MAX - 4 * plan.block_n)
            fail(FA_ERROR_UNSUPPORTED, "seqlen_k ", p.seqlen_k, " is too large for the CUDA inference kernels");
        const int64_t rows = int64_t(p.batch) * p.seqlen_q * p.num_heads;
        const bool partials = plan.splits > 1;
        w.add(Piece::partial_out, partials ? size_t(plan.splits * rows * plan.head_dim) * sizeof(float) : 0);
        w.add(Piece::partial_lse, partials ? size_t(plan.splits * rows) * sizeof(float) : 0);
    } else {
        training_forward_grid(problem, device, plan);
    }
    if (plan.ctas > INT_MAX)
        fail(FA_ERROR_UNSUPPORTED, "the CUDA forward needs ", plan.ctas, " thread blocks (query blocks of ",
             plan.block_m, " rows x splits ", plan.splits, " x batch ", p.batch, " x heads ", p.num_heads,
             "), more than the 2^31-1 a grid holds");
    return plan;
}

Problem kvcache_attention(const KvCacheProblem& problem, void* q_rotated) {
    const fa_fwd_params& f = problem.p.fwd;
    Problem attention = problem.attention;
    if (problem.rotary())
        attention.p.q = fa_tensor{q_rotated, int64_t(f.seqlen_q) * f.num_heads * f.head_dim,
                                  int64_t(f.num_heads) * f.head_dim, f.head_dim};
    return attention;
}

ForwardPlan plan_kvcache(const KvCacheProblem& problem, const DeviceInfo& device, const Overrides& overrides) {
    const fa_fwd_params& f = problem.p.fwd;
    const size_t rotated_q = problem.rotary() ? size_t(int64_t(f.batch) * f.seqlen_q * f.num_heads * f.head_dim) * 2 : 0;
    // Only the rotated copy's alignment reaches the attention's plan: an aligned placeholder stands
    // in for its address (a workspace piece is 256-byte aligned from a 16-byte aligned base).
    ForwardPlan plan = plan_forward(kvcache_attention(problem, reinterpret_cast<void*>(uintptr_t(256))), device,
                                    overrides);
    WorkspaceLayout attention = plan.workspace;
    plan.workspace = WorkspaceLayout{};
    plan.workspace.add(Piece::rotated_q, rotated_q);
    for (size_t i = 0; i < size_t(Piece::count); ++i)
        if (Piece(i) != Piece::rotated_q) plan.workspace.add(Piece(i), attention.bytes[i]);
    return plan;
}

// ---------------------------------------------------------------------------------------------
// Backward.

// Deterministic dQ scratch is bounded: fewer chunks (less parallelism) beyond this. 512 MB measured
// too tight on the H200 (d256, 8 heads, 16k: 3 chunks, 46 TFLOP/s against 187); 4 GB fills the
// device at the benchmark shapes. A fixed bound, not free memory, so that the size query agrees.
constexpr size_t kMaxDeterministicDqBytes = size_t(4) << 30;

// GQA's grid over KV heads on the Hopper backward, automatic up to this many keys. H100, walk /
// scratch, both modes: d128 (32/8, 64/8) 1.05-1.06x at 4k, 1.00-1.06x at 8k, 1.00x at 16k (default),
// deterministic 1.08-1.12x at 4k, 1.04x at 8k; d256 (32/4) 1.02-1.04x at 4k-8k; 32/8 causal 1.03x
// at 4k, 1.02x at 8k (docs/perf-log.md). Past 8k the walk's longer CTAs gain nothing
// over the scratch's adds (16k: 0.99-1.01x).
constexpr int64_t kKvMajorMaxKeys = 8192;
// Causal GQA with groups of this size or larger: the walk over pairs of query heads (the scratch
// only in deterministic mode past deterministic_pairs_max_keys); in deterministic mode from
// kDeterministicPairsGroup past kDeterministicPairsMinKeys keys.
constexpr int64_t kCausalPairsGroup = 8;
// Deterministic mode's pairs against the scratch at 8k (H100, causal): d128 1.04x (32 / 8, 64 / 8),
// d256 0.89x (32 / 4); past 8k not measured.
constexpr int64_t deterministic_pairs_max_keys(int tile_dim) { return tile_dim <= 128 ? 8192 : 4096; }
constexpr int64_t kDeterministicPairsGroup = 4;
constexpr int64_t kDeterministicPairsMinKeys = 1024;

BackwardPlan plan_backward(const BwdProblem& problem, const DeviceInfo& device, const Overrides& overrides) {
    const Problem& pr = problem.fwd;
    const fa_fwd_params& p = pr.p;
    const bool varlen = pr.varlen;
    BackwardPlan plan;
    require(p.dtype == FA_FLOAT16 || p.dtype == FA_BFLOAT16, "dtype must be FA_FLOAT16 or FA_BFLOAT16 on CUDA");
    require_runnable(device, p);
    Staging& s = plan.staging;
    set_widths(pr, s);
    // Deterministic mode: on the Hopper kernel (without softcap/ALiBi), dQ added in a fixed
    // key-block order under per-query-block counters (ordered_dq, below); elsewhere, or with the
    // override deterministic_dq=chunks, per-chunk dQ buffers summed in chunk order.
    const bool deterministic = problem.p.deterministic;
    // Softcap or ALiBi (the extras kernel): no ordered instance of it, chunks.
    const bool extras = pr.p.softcap > 0.0f || pr.p.alibi_slopes != nullptr || !(pr.scale > 0.0f);
    const bool ordered_allowed = overrides.deterministic_dq == DeterministicDqChoice::ordered ||
                                 overrides.deterministic_dq == DeterministicDqChoice::automatic;
    // The Hopper backward's value-dim instance (q/k 192 with v 128: V, dO and dV at 128, nothing
    // staged for the widths): wherever the Hopper backward would run at the padded width, i.e. a
    // Hopper device with the sm_90a kernels, the tile head dim compiled, no dropout, not overridden
    // to the mma.sync kernel, and in deterministic mode with the ordered dQ (its chunked form is the
    // P/dS schedule's, which at d256 measured slower than the mma.sync kernel: automatic keeps the
    // staged path there, as at d256). Every other pair stages v/dout at the wider width.
    const int value_dim = tiles::backward_sm90_value_dim(s.qk_dim);
    const bool value_width =
        value_dim != 0 && s.v_dim == value_dim && device.hopper() && device.sm90_kernels &&
        std::find(device.tile_dims.begin(), device.tile_dims.end(), s.qk_dim) != device.tile_dims.end() &&
        !pr.has_dropout() && overrides.backward_kernel != KernelChoice::sm80 &&
        !(overrides.backward_kernel == KernelChoice::automatic && deterministic && (extras || !ordered_allowed));
    if (value_width) set_widths(pr, s, true);
    const bool pad_qk = s.qk_dim != s.padded_dim, pad_v = s.v_dim != s.padded_dim_v;
    s.dense_batch = varlen ? 1 : p.batch;
    s.q_rows = varlen ? pr.total_q : p.seqlen_q; // per batch entry of the tensors
    s.k_rows = varlen ? p.total_k : p.seqlen_k;
    s.kv_batch = s.dense_batch;
    s.kv_has_batch = !varlen;
    s.q = s.q_rows > 0 && (pad_qk || !chunk_aligned(p.q, !varlen));
    s.dout = s.q_rows > 0 && (pad_v || !chunk_aligned(problem.p.dout, !varlen));
    s.k = s.k_rows > 0 && (pad_qk || !chunk_aligned(p.k, !varlen));
    s.v = s.k_rows > 0 && (pad_v || !chunk_aligned(p.v, !varlen));
    plan.tile_dim = tile_head_dim(device, s.padded_dim);
    plan.tile_dim_v = value_width ? value_dim : plan.tile_dim;
    plan.q_rows_total = varlen ? pr.total_q : int64_t(p.batch) * p.seqlen_q;
    plan.k_rows_total = varlen ? p.total_k : int64_t(p.batch) * p.seqlen_k;
    // (Staged widths: the main kernel would write padded_dim columns, the finishing sums write the real ones.)
    plan.dkv_scratch = pr.group > 1 || s.pad_head_dim || !chunk_aligned(problem.p.dk, !varlen) ||
                       !chunk_aligned(problem.p.dv, !varlen);
    // Automatic wherever the tile head dim has the ordered instance: d256 and 192 / 128 (their chunked
    // dQ runs the mma.sync kernel at a third of the speed) and d128 (H200, ordered / chunks 1.08-1.30x).
    const bool ordered_wanted = deterministic && !extras && ordered_allowed &&
                                tiles::backward_sm90_ordered_dq(plan.tile_dim, plan.tile_dim_v);

    // The Hopper kernel (FlashAttention-3's scheme) at its tile dims without dropout, where it
    // measured faster than the mma.sync kernel on the H200: d64 and d256 everywhere, d128 from 512
    // queries (1.32x at 512); not for d256 in deterministic mode (chunks: a CTA walks several key
    // blocks, and it measured 0.71-0.85x).
    bool sm90 = false;
    if (!device.hopper()) {
        plan.rejected.add(Kernel::backward_sm90, "needs compute capability 9.0");
    } else if (!device.sm90_kernels) {
        plan.rejected.add(Kernel::backward_sm90, "this build has no sm_90a kernels (FLASHATTN_CUDA_ARCHS)");
    } else if (!tiles::backward_sm90_has(plan.tile_dim, plan.tile_dim_v)) {
        plan.rejected.add(Kernel::backward_sm90, "tile head dims 64, 128 and 256, and 192 with v 128, only");
    } else if (pr.has_dropout()) {
        plan.rejected.add(Kernel::backward_sm90, "dropout: its registers hold query pairs, Philox words come in key pairs");
    } else if (overrides.backward_kernel == KernelChoice::sm80) {
        plan.rejected.add(Kernel::backward_sm90, "overrides: backward_kernel=sm80");
    } else if (overrides.backward_kernel == KernelChoice::automatic && plan.tile_dim == 128 && p.seqlen_q < 512) {
        plan.rejected.add(Kernel::backward_sm90, "d128 below 512 queries: not measured faster");
    } else if (overrides.backward_kernel == KernelChoice::automatic && plan.tile_dim == 256 && deterministic &&
               !ordered_wanted) {
        plan.rejected.add(Kernel::backward_sm90, "d256 deterministic (chunks): the mma.sync kernel measured faster");
    } else {
        sm90 = true;
    }
    plan.ordered_dq = sm90 && ordered_wanted;
    // Keys per CTA: the mma.sync kernel's, or the Hopper kernel's (96 at 192 / 128).
    plan.block_n = sm90 ? tiles::backward_sm90_block_n(plan.tile_dim, plan.tile_dim_v) : tiles::backward(plan.tile_dim).block_n;
    plan.num_n_blocks = int(ceil_div(p.seqlen_k, plan.block_n));
    if (value_width && !sm90) fail(FA_ERROR_INTERNAL, "the backward's value-dim instance was planned off the sm90 kernel");

    const size_t dq_buffer = size_t(p.num_heads) * plan.q_rows_total * plan.tile_dim * sizeof(float);
    size_t chunks = 1;
    if (deterministic && !plan.ordered_dq) {
        // (sequence, head, chunk) CTAs that fill the device in one wave, within the memory bound:
        // rounding up gave 1.2-1.5 waves (d64 16k: 160 CTAs on 132 SMs, 150 TFLOP/s against 237
        // with 3 chunks), so round down.
        const int64_t items = std::max<int64_t>(1, int64_t(p.batch) * p.num_heads);
        chunks = size_t(std::clamp<int64_t>(device.sm_count / items, 1, std::max<int64_t>(plan.num_n_blocks, 1)));
        while (chunks > 1 && chunks * dq_buffer > kMaxDeterministicDqBytes) --chunks;
        plan.num_chunks = int(chunks);
        plan.dq_chunk_stride = int64_t(dq_buffer / sizeof(float));
    }
    // CTA c of a (sequence, head) visits key blocks c, c + num_chunks, ...: one per key block unless
    // deterministic with chunks.
    if (plan.num_chunks <= 0 || plan.num_chunks > plan.num_n_blocks) plan.num_chunks = plan.num_n_blocks;
    plan.ctas = int64_t(plan.num_chunks) * p.batch * p.num_heads;
    if (plan.ctas > INT_MAX)
        fail(FA_ERROR_UNSUPPORTED, "the CUDA backward needs ", plan.ctas, " thread blocks (key blocks of ",
             plan.block_n, " rows x batch ", p.batch, " x heads ", p.num_heads, "), more than the 2^31-1 a grid holds");
    // GQA on the Hopper kernel: a CTA per (sequence, KV head, key block) walks the group's query
    // heads, so dK/dV stay in registers and are written once in 16 bits: no fp32 scratch per query
    // head (1 GB at 64/8 heads, 16k) and no finishing sum over the group. In deterministic mode only
    // with the ordered dQ where it has a walking instance (d128, d256; not with the chunks, whose CTAs
    // walk key blocks), not with softcap or ALiBi (no such instance), staged widths or dk/dv outside
    // 16-byte chunks. Automatic up to kKvMajorMaxKeys keys, where the scratch's fixed cost
    // dominates; past it the longer CTAs measured slower, as at d256 with a causal mask
    // (docs/perf-log.md).
    const bool walk_deterministic = plan.ordered_dq && tiles::backward_sm90_ordered_walk(plan.tile_dim, plan.tile_dim_v);
    const bool kv_major_fits = sm90 && pr.group > 1 && (!deterministic || walk_deterministic) && !extras &&
                               !s.pad_head_dim && chunk_aligned(problem.p.dk, !varlen) && chunk_aligned(problem.p.dv, !varlen);
    // The walk over pairs of query heads (a CTA per two heads of a group): even groups. Each CTA adds its
    // pair's dK / dV into fp32 rows per KV head, zeroed first; in deterministic mode it stores them in
    // rows of its own, which the finishing pass sums in pair order.
    const bool pairs_fit = kv_major_fits && pr.group % 2 == 0;
    const bool causal_pairs_rule =
        p.causal && (pr.group >= kCausalPairsGroup || (deterministic && pairs_fit && pr.group >= kDeterministicPairsGroup &&
                                                       p.seqlen_k > kDeterministicPairsMinKeys));
    bool walk_pairs = false;
    switch (overrides.backward_gqa) {
    case GqaBackwardChoice::kv_major: plan.kv_major = kv_major_fits; break;
    case GqaBackwardChoice::kv_pairs: plan.kv_major = walk_pairs = pairs_fit; break;
    case GqaBackwardChoice::scratch: plan.kv_major = false; break;
    case GqaBackwardChoice::automatic:
        if (causal_pairs_rule) {
            // Under a causal mask with groups of 8 or more the whole group's walk makes CTAs of up to
            // group x query blocks (64 blocks at 1k against 8 at the other end of the grid) and the
            // grid's last wave waits on the long ones, while the scratch adds (or, deterministic,
            // stores and sums) every query head's dK / dV: pairs of heads halve the CTAs' spread and
            // quarter the rows. H100, end to end against the scratch (both role orders): 64 / 8 d128
            // 1.07 / 1.06 / 1.00 at 1k / 2k / 4k, 32 / 4 d256 1.064 / 1.045 / 0.99; deterministic
            // (one order, the pairs timed as the variant) 64 / 8 1.12 / 1.08 / 1.02, 32 / 4 1.03 /
            // 0.98 / 1.02. Deterministic mode also at even groups of 4 or more past 1024 keys
            // (H100, d128 32 / 8 causal, both role orders, the pairs against the whole walk at 1k / 2k
            // and the scratch at 4k / 8k: 0.98 / 1.08 / 1.05 / 1.00). Past 4096 keys the pairs against
            // the scratch: default mode 1.01-1.03x at 8k and 16k (64 / 8 d128, 32 / 4 d256).
            plan.kv_major = walk_pairs =
                pairs_fit && (!deterministic || p.seqlen_k <= deterministic_pairs_max_keys(plan.tile_dim));
            break;
        }
        // Not under a causal mask on the P/dS schedule (d256 measured 0.87-0.98x there; 192 / 128 runs
        // the same schedule, unmeasured).
        plan.kv_major = kv_major_fits && p.seqlen_k <= kKvMajorMaxKeys &&
                        !(tiles::backward_sm90_pds_schedule(plan.tile_dim, plan.tile_dim_v) && p.causal);
        break;
    }
    if (plan.kv_major) {
        plan.walk_heads = walk_pairs ? 2 : int(pr.group);
        plan.dkv_scratch = plan.walk_heads < pr.group; // several CTAs' sums per KV head
        plan.ctas = int64_t(plan.num_chunks) * p.batch * (p.num_heads / plan.walk_heads);
    }

    // Sections of (sequence, head) pairs whose Q, dO (16-bit) and dQ scratch (fp32) take about 40 MB
    // (FlashAttention-3's L2 figure), 24 MB for the ordered dQ's grid, whose sections hold a pair's
    // key blocks far apart in launch order, each reading its rows again: there 40 MB left 3-11% of
    // the deterministic kernel's time to the L2 against 24 MB at 1k-2k (H200, d128 and d256;
    // docs/perf-log.md, KK), where the default grid's tail (below) lost 2-4% at 24 MB. On the group
    // walk a pair is a (sequence, KV head) with the rows of its group's query heads.
    constexpr double kSectionBytes = 40.0 * 1024 * 1024, kOrderedSectionBytes = 24.0 * 1024 * 1024;
    const int64_t pairs = std::max<int64_t>(1, int64_t(p.batch) * (p.num_heads / plan.walk_heads));
    const double pair_bytes = std::max(1.0, (varlen ? double(pr.total_q) / double(std::max(p.batch, 1)) : double(p.seqlen_q)) *
                                                plan.walk_heads *
                                                double(plan.tile_dim * (2 + 4) + plan.tile_dim_v * 2));
    const double section_fit = std::floor(kSectionBytes / pair_bytes);
    if (plan.ordered_dq) {
        // The order of each query block's dQ additions, and the grid that runs them in it (each
        // CTA waits only for CTAs launched before it): with the rows' key ranges starting later
        // down the rows (a right window edge: causal, local), key block n + 1 meets a query block
        // after fewer blocks of its walk than key block n, so running n + 1 first (from the last
        // key block down) lets each predecessor stay ahead; without a right edge every key block
        // meets the query blocks from the first, and the natural order serves.
        plan.dq_keys_descending = pr.mask.window_right >= 0;
        // Sections of pairs, the pairs fastest within a section: the CTAs of one pair are then a
        // section's width apart in launch order, so each starts well after its predecessor (no wait
        // once the grid runs staggered), and the L2 holds the section's rows while its key blocks
        // pass (docs/perf-log.md, ordered dQ). Under a right window edge, one pair a section: its
        // key blocks, from the last down, each meet more query blocks than the one before, so a
        // successor launched right behind its predecessor still finds it ahead, and the rows stay
        // in L2 for one pair's time (H100, d128 and d256, MHA and GQA: +7-11% at causal 1k, +1-10%
        // at 2k, 0-2% from 4k; without a mask it lost 5-16%).
        plan.dq_section_pairs = plan.dq_keys_descending
                                    ? 1
                                    : int(std::clamp<double>(std::floor(kOrderedSectionBytes / pair_bytes), 1.0, double(pairs)));
        plan.dq_semaphore_rows = tiles::backward_sm90_block_m(plan.tile_dim);
        plan.dq_semaphore_blocks = int(ceil_div(p.seqlen_q, plan.dq_semaphore_rows));
    } else if (sm90 && plan.num_chunks == plan.num_n_blocks && pr.mask.window_right >= 0) {
        // A right window edge (causal): a pair's key block n meets fewer query blocks than n - 1,
        // so pair by pair the grid would end on the last pairs' long first CTAs while other SMs
        // idle. Its last pairs, about four waves of CTAs and no more than a section, run key-major
        // instead (BwdArgs::tail_pairs): a list-scheduling model of 132 SMs (bench/grid_order_model.py)
        // put pair by pair at 4-7% over the ideal at 1k-4k, with the tail at 0.5-1.5%; on the H200
        // the tail measured 1.00-1.09x pair by pair at d128 / d256 causal 1k-4k. At least two pairs
        // where a section holds one (a pair of 20-40 MB of rows: 192 / 128 and d256 at 16k): the
        // model's 1.020 -> 1.008 at 192 / 128 16k measured 1.016x (H100, both role orders twice),
        // d256 16k 1.00 (the model: 1.002 either way).
        const int64_t waves = ceil_div(int64_t(4) * std::max(device.sm_count, 1), int64_t(std::max(plan.num_n_blocks, 1)));
        const int64_t tail = std::min<int64_t>({waves, std::max<int64_t>(int64_t(section_fit), 2), pairs});
        plan.tail_pairs = tail >= 2 ? int(tail) : 0;
    }

    if (sm90) plan.rejected.add(Kernel::backward_sm80, "the sm90 kernel serves this call");
    plan.kernel = sm90 ? Kernel::backward_sm90 : Kernel::backward_sm80;
    // GQA through the scratch on the Hopper kernel, outside deterministic mode: dK / dV added into
    // rows per KV head (reductions in L2) instead of stored per query head, written to memory and
    // read back by the finishing sum (1 GB each way at d256, 32 / 4 heads, 16k tokens).
    plan.dkv_add = plan.dkv_scratch && pr.group > 1 && sm90 && !deterministic;

    WorkspaceLayout& w = plan.workspace;
    w.add(Piece::dsum, size_t(p.num_heads) * plan.q_rows_total * sizeof(float));
    w.add(Piece::lse_log2, sm90 ? (size_t(p.num_heads) * plan.q_rows_total + 1) * sizeof(float) : 0);
    w.add(Piece::dq_accum, chunks * dq_buffer);
    // Rows of tile_dim floats for dK and dV alike (BwdArgs::accum_cols; dV's rows in the value-dim
    // instance use their first tile_dim_v).
    // (Rows per KV head, or per unit of the grid: query head, or pair on the pairs' walk.)
    const size_t dkv_heads = plan.dkv_add ? size_t(p.num_heads_k) : size_t(p.num_heads / plan.walk_heads);
    const size_t dkv_bytes = plan.dkv_scratch ? dkv_heads * plan.k_rows_total * plan.tile_dim * 4 : 0;
    w.add(Piece::dk_accum, dkv_bytes);
    w.add(Piece::dv_accum, dkv_bytes);
    w.add(Piece::q, s.q ? staged_bytes(s.dense_batch, s.q_rows, p.num_heads, s.padded_dim) : 0);
    w.add(Piece::dout, s.dout ? staged_bytes(s.dense_batch, s.q_rows, p.num_heads, s.padded_dim_v) : 0);
    w.add(Piece::k, s.k ? staged_bytes(s.dense_batch, s.k_rows, p.num_heads_k, s.padded_dim) : 0);
    w.add(Piece::v, s.v ? staged_bytes(s.dense_batch, s.k_rows, p.num_heads_k, s.padded_dim_v) : 0);
    // dsink's terms, one per CTA of the dsum pass, summed in a fixed order in deterministic mode
    // (else the CTAs add theirs to dsink atomically).
    plan.dsink_terms = problem.p.dsink && deterministic ? int64_t(p.num_heads) * p.batch * tiles::dsum_row_blocks(p.seqlen_q) : 0;
    w.add(Piece::dsink_partial, size_t(plan.dsink_terms) * sizeof(float));
    w.add(Piece::dq_semaphore,
          plan.ordered_dq ? size_t(p.batch) * size_t(p.num_heads) * size_t(plan.dq_semaphore_blocks) * sizeof(int32_t) : 0);
    return plan;
}

} // namespace flashattn::cuda
