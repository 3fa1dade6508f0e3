// The tile of every CUDA kernel family per tile head dim, in plain C++ (no CuTe, no CUDA headers):
// the planner (host/planner.cpp, which is also built without nvcc for its tests) and the kernels'
// traits read these same numbers, so a plan's grid and split counts always match the kernel that
// runs it. The reasons behind each choice, and their measurements, are in docs/perf-log.md.
#pragma once

namespace flashattn::cuda::tiles {

// The tile head dims a build can compile (CMake FLASHATTN_HEADDIMS picks a subset).
constexpr int kHeadDims[] = {32, 64, 96, 128, 192, 256};

// Forward, mma.sync (kernels/fwd_kernel.cuh): query rows per CTA, keys per K/V block, warps stacked
// along the query rows (each warp owns whole rows of S: its softmax needs no shared memory).
struct ForwardSm80 {
    int block_m, block_n, warps;
};
constexpr ForwardSm80 forward_sm80(int head_dim) {
    return head_dim <= 64    ? ForwardSm80{128, 128, 4}
           : head_dim <= 128 ? ForwardSm80{128, 64, 4}
                             : ForwardSm80{128, 64, 8};
}

// Forward, wgmma (kernels/fwd_kernel_sm90.cuh): consumer warpgroups of 64 query rows each, two, or
// three up to d64, where one warpgroup's softmax (the same exp2s per block at any head dim) takes
// about as long as another's products, so a third keeps the tensor cores fed; 128 keys
// per block where Q and two stages of 128-key K and V blocks fit in the 227 KB of shared memory
// (with 64-key blocks wgmma's reads of K alone would saturate shared memory), else 64: d <= 128 and
// 192 / 128 take 128, d192 and d256 64. The persistent form (a CTA loops over tiles) is compiled
// where O's accumulator is at most 64 x 128 per consumer (head_dim_v <= 128): above, the loop's state
// does not fit beside it. head_dim_v is the value head dim (V and O), head_dim the query's (Q, K).
struct ForwardSm90 {
    int block_m, block_n;
    bool can_persist;
};
// The tile (64 query rows per consumer): three consumers up to d64, else two.
constexpr ForwardSm90 forward_sm90(int head_dim, int head_dim_v) {
    const int block_m = head_dim <= 64 && head_dim_v <= 64 ? 192 : 128;
    const int q_bytes = block_m * head_dim * 2, ring_bytes = 2 * 128 * (head_dim + head_dim_v) * 2;
    return {block_m, q_bytes + ring_bytes <= 227 * 1024 ? 128 : 64, head_dim_v <= 128};
}
constexpr ForwardSm90 forward_sm90(int head_dim) { return forward_sm90(head_dim, head_dim); }

// The value head dim of the Hopper forward's instance with a narrower V than Q/K at this tile head
// dim (0: none). Such a call runs P V, O's registers and its store at the value width instead of
// staging v and out zero-padded to the query's (the planner, docs/cuda-backend.md). 192 / 128 is
// DeepSeek's; src/cuda/CMakeLists.txt compiles it where 192 is built for sm_90a.
constexpr int forward_sm90_value_dim(int tile_dim) { return tile_dim == 192 ? 128 : 0; }

// The forward's inference variant (kernels/fwd_kernel.cuh with kInference): taller query tiles
// against a KV cache, paged K/V, split-KV. 64 query rows, long K/V blocks, and the deepest ring of
// (K, V) stages with which two CTAs still share an SM at d <= 128 (16 KB of Q + 3 x 32 KB at d128).
struct Inference {
    int block_m, block_n, warps, kv_stages;
};
constexpr Inference inference(int head_dim) {
    return {64, head_dim <= 64 ? 128 : 64, 4, head_dim <= 128 ? 3 : 2};
}

// The split-keys decode kernel (kernels/fwd_decode_kernel.cuh): tiles of at most 16 query rows (one
// query row, or the query heads of one KV head packed), the CTA's K/V blocks split across its warps,
// each warp with its own ring of stages: as many as fit in ~110 KB (two CTAs per SM), 3 to 6.
struct Decode {
    int block_m, block_n, warps, kv_stages;
};
constexpr Decode decode(int head_dim) {
    const int warps = 4, block_n = head_dim <= 64 ? 32 : 16;
    const int q_bytes = 16 * head_dim * 2, stage_bytes = 2 * block_n * head_dim * 2;
    const int fit = (110 * 1024 - q_bytes) / (warps * stage_bytes);
    return {16, block_n, warps, fit < 3 ? 3 : fit > 6 ? 6 : fit};
}
// Query rows a decode tile holds: calls whose tiles fit run the split-keys kernel.
constexpr int kDecodeRows = 16;

// Backward, mma.sync (kernels/bwd_kernel.cuh): query rows per Q block, keys per CTA, warps, the M
// extent (in warps) of each of the three warp grids (S/dP, dK/dV, dQ) and the column slabs dQ is
// computed in (at d256 a whole 64 x 256 dQ tile would be 64 more fp32 registers per thread beside
// dK's and dV's). FlashAttention-2's sm80/sm90 tiles and warp grids, plus dQ slabs at d256.
struct Backward {
    int block_m, block_n, warps, atom_m_sdp, atom_n_kv, atom_m_q, dq_slabs;
};
constexpr Backward backward(int head_dim) {
    return head_dim <= 64    ? Backward{128, 128, 8, 4, 4, 4, 1}
           : head_dim <= 96  ? Backward{64, 128, 8, 2, 4, 4, 1}
           : head_dim <= 128 ? Backward{64, 128, 8, 2, 4, 2, 1}
           : head_dim <= 192 ? Backward{64, 64, 8, 4, 2, 2, 1}
                             : Backward{64, 64, 8, 4, 2, 2, 2};
}

// Backward, wgmma (kernels/bwd_kernel_sm90.cuh): tile head dims 64, 128 and 256, and q/k 192 with
// v 128 (backward_sm90_value_dim), the same key blocks as the mma.sync kernel but at 192 / 128
// (backward_sm90_block_n). d256 and 192 / 128 run the schedule that passes P and dS through
// shared memory (kernels/bwd_kernel_sm90_pds.cuh): keeping dK and dV of 64 keys x the whole head
// dims in registers would take 256 fp32 per consumer thread at d256, and at 192 / 128 160, which
// with S^T, dP^T (or the 16-bit P^T, dS^T and dQ) leaves nothing of the 240 a consumer may have
// (docs/cuda-backend.md has the arithmetic). tile_head_dim_v is the
// value head dim (V, dO, dV), tile_head_dim the query's (Q, K, dQ, dK).
//
// The value head dim of the Hopper backward's instance with a narrower V than Q/K at this tile head
// dim (0: none): such a call reads v and dout and writes dv at their own width instead of staging
// them zero-padded to the query's (the planner, docs/cuda-backend.md). 192 / 128 is DeepSeek's;
// src/cuda/CMakeLists.txt compiles it where 192 is built for sm_90a.
constexpr int backward_sm90_value_dim(int tile_head_dim) { return tile_head_dim == 192 ? 128 : 0; }
constexpr bool backward_sm90_has(int tile_head_dim, int tile_head_dim_v) {
    return tile_head_dim_v == tile_head_dim
               ? tile_head_dim == 64 || tile_head_dim == 128 || tile_head_dim == 256
               : tile_head_dim_v == backward_sm90_value_dim(tile_head_dim);
}
constexpr bool backward_sm90_has(int tile_head_dim) { return backward_sm90_has(tile_head_dim, tile_head_dim); }
constexpr bool backward_sm90_pds_schedule(int tile_head_dim, int tile_head_dim_v) {
    return tile_head_dim == 256 || (tile_head_dim_v != tile_head_dim && backward_sm90_has(tile_head_dim, tile_head_dim_v));
}
constexpr bool backward_sm90_pds_schedule(int tile_head_dim) { return backward_sm90_pds_schedule(tile_head_dim, tile_head_dim); }
// Keys per CTA (key block) of the Hopper backward: the mma.sync kernel's, but 96 at 192 / 128 and 80
// at d256, as FlashAttention-3's: every block's dQ leaves the SM in fp32 through shared memory (48 KB
// written and read again at 64 x 192), and each consumer's S and dP read all of Q and dO for its
// share of the keys, so a 64 x 64 block reads and writes ~384 KB of shared memory for 6.8 MFLOP: at
// an SM's 128 B per clock 1.8x the tensor cores' time for it; 64 x 96, ~464 KB for 10.2 MFLOP,
// 1.45x. At d256 a 64 x 64 block reads ~336 KB for 10.5 MFLOP (1.05x the tensor time), 64 x 80
// about a fifth less a FLOP. dK and dV are then computed transposed (the head dim as wgmma's M,
// Sm90BwdPdSTraits), as neither key block is two consumers' 64-row M extents.
constexpr int backward_sm90_block_n(int tile_head_dim, int tile_head_dim_v) {
    return tile_head_dim_v != tile_head_dim && backward_sm90_has(tile_head_dim, tile_head_dim_v) ? 96
           : tile_head_dim == 256                                                               ? 80
                                                                                                 : backward(tile_head_dim).block_n;
}
// Query rows per block of the Hopper backward (its traits' default kBlockM). 64; at d64 128,
// as FlashAttention-3's: with 64 the S^T / dP^T products are 64 x 64 x 64 (each SS wgmma reads as
// many shared-memory bytes per FLOP as an SM delivers) and dQ's is split into 32-column halves,
// so the tensor cores wait on shared memory and each block's fixed cost (barriers, the dQ hand-off)
// falls on half the work.
constexpr int kBackwardSm90BlockM = 64;
// At d128 80, as FlashAttention-3's non-causal tile: S^T / dP^T 64 x 80 per consumer (a shared-memory
// feed of 36 FLOP/B against 32 at 64 wide).
constexpr int backward_sm90_block_m(int tile_head_dim) {
    return tile_head_dim <= 64 ? 128 : tile_head_dim == 128 ? 80 : kBackwardSm90BlockM;
}
// Tile head dims whose Hopper schedule adds dQ in deterministic mode's fixed order (its own kernel
// instance, at the head dim's block height: the unit its counters count): every one the Hopper
// backward has (at d256 and 192 / 128 the chunked form measured slower than the mma.sync kernel;
// at d64 and d128 the ordered dQ beat the chunks, docs/perf-log.md).
constexpr bool backward_sm90_ordered_dq(int tile_head_dim, int tile_head_dim_v) {
    return backward_sm90_has(tile_head_dim, tile_head_dim_v);
}
constexpr bool backward_sm90_ordered_dq(int tile_head_dim) { return backward_sm90_ordered_dq(tile_head_dim, tile_head_dim); }
// ... and the ordered dQ on the GQA group walk (a CTA per KV head walking its group's query heads,
// its own instance): d128 and d256, whose GQA rows the walk serves at short lengths.
constexpr bool backward_sm90_ordered_walk(int tile_head_dim, int tile_head_dim_v) {
    return (tile_head_dim == 128 || tile_head_dim == 256) && tile_head_dim_v == tile_head_dim;
}

// The backward's row kernels (kernels/aux/bwd_aux_kernels.cu: dsum, the finishing sums): query rows
// per CTA, and the CTAs of dsum per (sequence, head) for seqlen_q rows (each adds one dsink term).
constexpr int kRowKernelRows = 16;
constexpr long long dsum_row_blocks(long long seqlen_q) { return (seqlen_q + kRowKernelRows - 1) / kRowKernelRows; }

} // namespace flashattn::cuda::tiles
