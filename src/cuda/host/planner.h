// What the CUDA backend runs for a call, decided on the host from the problem, the device and the
// overrides alone: the kernel, its tile and grid, the K/V splits, and every piece of scratch memory.
//
// A pure function: no CUDA call, no device memory. So a workspace size query and the call share one
// plan, and the tests (tests/planner, built in every configuration and run by CI) check each choice
// without a GPU. Every kernel the plan does not take says why (`rejected`), as PyTorch's SDPA
// dispatch does. The reasons behind each rule, with their measurements: docs/perf-log.md.
#pragma once

#include "core/overrides.h"
#include "core/problem.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace flashattn::cuda {

enum class Kernel : uint8_t {
    forward_sm80,  // kernels/fwd_kernel.cuh: FlashAttention-2's forward on mma.sync (sm_80 and newer)
    forward_sm90,  // kernels/fwd_kernel_sm90.cuh: warp-specialised wgmma (sm_90a)
    inference,     // kernels/fwd_kernel.cuh's inference variant: 64-row tile, a ring of K/V stages
    decode,        // kernels/fwd_decode_kernel.cuh: tiles of <= 16 rows, K/V split across warps
    backward_sm80, // kernels/bwd_kernel.cuh
    backward_sm90, // kernels/bwd_kernel_sm90.cuh (d256: kernels/bwd_kernel_sm90_pds.cuh)
};
const char* kernel_name(Kernel kernel);

// The device as the planner sees it (host/device_info.cu reads it from the runtime, once a device).
struct DeviceInfo {
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    bool sm90_kernels = false; // the build compiled the sm_90a kernels
    std::vector<int> tile_dims; // the compiled tile head dims, ascending
    // CTAs one SM holds of the decode and inference kernels, per compiled tile dim (occupancy).
    std::vector<int> decode_ctas_per_sm, inference_ctas_per_sm;

    bool hopper() const { return cc_major == 9 && cc_minor == 0; }
};

// A kernel the plan did not take for this call, and why.
struct Rejection {
    Kernel kernel;
    const char* reason;
};
struct Rejections {
    std::array<Rejection, 6> items{};
    int count = 0;
    void add(Kernel kernel, const char* reason) { items[size_t(count++)] = {kernel, reason}; }
};

// The scratch memory of a call, one piece per purpose, each 256-byte aligned from a 16-byte aligned
// base (the caller's workspace, or one stream-ordered allocation of `total` bytes).
enum class Piece : uint8_t {
    rotated_q,   // KV cache with rotary: q rotated into a packed copy
    q, k, v, out, dout, // packed, zero-padded copies of layouts the kernels cannot read in 16-byte chunks
    lse,         // the lse attn_probs is derived from, when the caller asked for none
    partial_out, partial_lse, // split-KV's fp32 partials
    dsum, dq_accum, dk_accum, dv_accum, // the backward's fp32 accumulators
    lse_log2,    // the Hopper backward's lse in log2 units, written by the dsum pass, and one +inf before it
    dsink_partial, // deterministic dsink: one fp32 term per (head, sequence, dsum row block), summed in order
    dq_semaphore, // deterministic ordered dQ: an int32 counter per (sequence, head, query block), zeroed by dsum
    tile_counter, // forward_sm90 claiming its tiles: the counter, cleared by a kernel the forward depends on
    count
};
struct WorkspaceLayout {
    std::array<size_t, size_t(Piece::count)> offset{}, bytes{};
    size_t total = 0;

    static constexpr size_t rounded(size_t bytes) { return (bytes + 255) / 256 * 256; }
    void add(Piece piece, size_t piece_bytes) {
        offset[size_t(piece)] = total;
        bytes[size_t(piece)] = piece_bytes;
        total += rounded(piece_bytes);
    }
    size_t size(Piece piece) const { return bytes[size_t(piece)]; }
    size_t at(Piece piece) const { return offset[size_t(piece)]; }
};

// Copies of tensors the kernels cannot address in 16-byte chunks (a head dim that is not a multiple
// of 8, an unaligned base or stride) or whose width is not the one the kernels run at: packed
// (batch, rows, heads, padded_dim), zero-padded. Most kernels have one head dim for q, k, v and out;
// a value head dim unlike the query's runs there at padded_dim = max(head_dim, head_dim_v) rounded
// up to 8, the narrower side zero-padded (zero columns add nothing to Q K^T, and give zero columns
// of O, dQ, dK and dV, which are not copied back). The Hopper forward's value-dim instances
// (tiles::forward_sm90_value_dim: 192 / 128) read q and k at padded_dim = head_dim and v and out at
// padded_dim_v = head_dim_v: nothing is padded, only layouts the kernel cannot address are staged.
// The same holds for the Hopper backward's value-dim instance (tiles::backward_sm90_value_dim): q, k
// and dout, v at their own widths.
struct Staging {
    bool q = false, k = false, v = false, out = false, dout = false;
    bool pad_head_dim = false; // some width differs from the kernels': those tensors are staged, zero-padded
    int padded_dim = 0;        // the width the kernels read q and k (dq, dk) at
    int padded_dim_v = 0;      // ... v and out (dout, dv) at: padded_dim but in the value-dim instances
    int qk_dim = 0, v_dim = 0; // the caller's widths: of q and k (dq, dk), of v and out (dout, dv)
    int64_t dense_batch = 0, q_rows = 0; // q and out as staged: (dense_batch, q_rows, heads, padded_dim(_v))
    int64_t kv_batch = 0, k_rows = 0;    // k and v as stored: sequences, a KV cache's entries, or pool blocks
    bool kv_has_batch = false;           // k and v have a batch (or block) dimension, varlen or not
};

// How the decode kernel copies K/V blocks: whole blocks from one base address where every block is
// whole (head_dim equal to the tile's, up to d128; a contiguous cache, or pages that hold whole
// blocks), else row by row with predicates.
enum class DecodeLoads : uint8_t { predicated, whole_contiguous, whole_paged };

struct ForwardPlan {
    bool empty = false; // no query row: nothing to launch or write
    Kernel kernel = Kernel::forward_sm80;
    int tile_dim = 0;   // the compiled head dim that runs it
    int tile_dim_v = 0; // its value head dim: tile_dim, or a Hopper value-dim instance's (tiles::forward_sm90_value_dim)
    int head_dim = 0;   // what the kernels read of q and k: padded_dim when staged for the head dim, else head_dim
    int head_dim_v = 0; // ... of v and out: padded_dim_v when staged for the head dim, else head_dim_v
    int block_m = 0, block_n = 0;
    int64_t ctas = 0;
    int num_m_blocks = 0; // query tiles per (sequence, head): of seqlen_q rows, or the packed GQA heads
    int section_heads = 0; // tile order of a masked forward (kernels/tile_order.cuh); 0 = plain order
    bool sm90_persistent = false;   // forward_sm90: at most one CTA per SM, each looping over tiles
    bool sm90_claims_tiles = false; // forward_sm90 persistent: CTAs claim tiles from a counter
    // Inference (kernels inference and decode):
    int splits = 1;
    bool pack_gqa = false;       // one query row per sequence: a tile's rows are the heads of one KV head
    bool prefetch_pages = false; // decode over a paged cache on at most one CTA per SM
    DecodeLoads decode_loads = DecodeLoads::predicated;
    bool dependent_combine = false; // split-KV's combine as a programmatic dependent (sm_90)
    Staging staging;
    WorkspaceLayout workspace;
    Rejections rejected;
};

struct BackwardPlan {
    bool empty = false; // no tensor has a row
    Kernel kernel = Kernel::backward_sm80;
    int tile_dim = 0;
    int tile_dim_v = 0; // its value head dim: tile_dim, or the Hopper value-dim instance's (tiles::backward_sm90_value_dim)
    int block_n = 0;
    int num_chunks = 0;          // CTAs per (sequence, head) along the keys: CTA c visits key blocks c,
                                 // c + num_chunks, ... (one per key block unless deterministic)
    int num_n_blocks = 0;        // key blocks of the longest sequence
    int64_t ctas = 0;
    int64_t dq_chunk_stride = 0; // deterministic chunks: floats between the chunks' dQ buffers
    // Deterministic mode on the Hopper kernel: dQ added in a fixed key-block order (BwdArgs::
    // dq_semaphore) instead of chunks; one CTA per key block, one dQ buffer.
    bool ordered_dq = false;
    bool dq_keys_descending = false; // the order: key blocks from the last down (masks whose rows' key
                                     // ranges start later down the rows: causal, local), else up
    int dq_section_pairs = 0;        // the grid: sections of this many (sequence, head) pairs
    int dq_semaphore_blocks = 0;     // counters per (sequence, head): query blocks of the longest sequence
    int dq_semaphore_rows = 0;       // query rows of a counted block (tiles::backward_sm90_block_m)
    int tail_pairs = 0;              // the Hopper grid's key-major tail (BwdArgs::tail_pairs)
    bool dkv_scratch = false;    // dK/dV go through fp32 rows per grid unit (query head, or pair on the pairs'
                                 // walk: GQA, odd dk/dv layouts, staged widths)
    bool dkv_add = false;        // ... per KV head instead, added to (BwdArgs::dkv_add; zeroed first)
    bool kv_major = false;       // backward_sm90, GQA: a CTA per (sequence, KV head, chunk) walks
                                 // walk_heads of the group's query heads; the whole group: dK/dV
                                 // written once, no scratch
    int walk_heads = 1;          // query heads a CTA walks: 1, or with kv_major the group or a pair of its heads
                                 // (then through the scratch: the pairs' CTAs add their sums into fp32
                                 // rows per KV head, or in deterministic mode store rows per pair)
    int64_t dsink_terms = 0;     // deterministic dsink: (head, sequence, dsum row block) terms in scratch
    int64_t q_rows_total = 0, k_rows_total = 0;
    Staging staging;
    WorkspaceLayout workspace;
    Rejections rejected;
};

// The plans. `problem` is validated (core/validate.cpp); a problem the CUDA kernels cannot run (the
// compute capability, a head dim this build did not compile, sizes past 32-bit row indices) throws
// flashattn::Error with FA_ERROR_UNSUPPORTED and the reason.
ForwardPlan plan_forward(const Problem& problem, const DeviceInfo& device, const Overrides& overrides);
BackwardPlan plan_backward(const BwdProblem& problem, const DeviceInfo& device, const Overrides& overrides);
// A KV-cache call: the rotated copy of q first, then the attention's plan over the caches (whose q
// is that copy when rotary applies).
ForwardPlan plan_kvcache(const KvCacheProblem& problem, const DeviceInfo& device, const Overrides& overrides);

// The attention a KV-cache call runs after appending: q replaced by its rotated copy at `q_rotated`
// when rotary embedding applies.
Problem kvcache_attention(const KvCacheProblem& problem, void* q_rotated);

// The smallest compiled tile head dim that holds head_dim (FA_ERROR_UNSUPPORTED when none).
int tile_head_dim(const DeviceInfo& device, int head_dim);

} // namespace flashattn::cuda
