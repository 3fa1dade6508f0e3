// Tiles of the backward kernel per head dim, without CuTe, so the host side (backend.cu's
// workspace plan) reads the same numbers the kernels are built with.
//
// Query rows per Q block (kBlockM), keys per CTA (kBlockN), warps, and the M extent (in warps) of
// each of the three warp grids (kernels/bwd_traits.cuh). Started from FlashAttention-2's sm80
// choices; shared memory (double-buffered Q and dO) stays under the 227 KB an sm_90 CTA may use.
#pragma once

namespace flashattn::cuda::kernels {

template <int kHeadDim>
struct BwdTileConfig;
// kDqSlabs: dQ = dS K is computed in that many column slabs, one after the other (see bwd_traits.cuh):
// at d256 a whole 64 x 256 dQ tile is 64 more fp32 registers per thread next to dK and dV's 128.
// ptxas spills of the plain bf16 kernel (sm_90): d128 60 B (1 slab), 20 B (2); d256 72 B (1), 8 B (2),
// 24 B (4). Measured on the H200 (docs/perf-log.md, session 3): d256 2 slabs 192 vs 187 TFLOP/s with
// 1 at 16k, kept; d128 2 slabs 262 vs 273, so d128 stays at 1. d192 stays at 1 (slabs there were
// never built on a GPU machine).
// FlashAttention-2 (sm80/sm90, 144 KB+ of shared memory) uses the same tiles and atoms:
//   d64 128x128 4/4/4, d128 64x128 2/4/2, d256 64x64 4/2/2, all 8 warps; it keeps the whole dQ tile.
template <> struct BwdTileConfig<32> { static constexpr int kBlockM = 128, kBlockN = 128, kWarps = 8, kAtomMSdP = 4, kAtomNKV = 4, kAtomMQ = 4, kDqSlabs = 1; };
template <> struct BwdTileConfig<64> { static constexpr int kBlockM = 128, kBlockN = 128, kWarps = 8, kAtomMSdP = 4, kAtomNKV = 4, kAtomMQ = 4, kDqSlabs = 1; };
template <> struct BwdTileConfig<96> { static constexpr int kBlockM = 64, kBlockN = 128, kWarps = 8, kAtomMSdP = 2, kAtomNKV = 4, kAtomMQ = 4, kDqSlabs = 1; };
template <> struct BwdTileConfig<128> { static constexpr int kBlockM = 64, kBlockN = 128, kWarps = 8, kAtomMSdP = 2, kAtomNKV = 4, kAtomMQ = 2, kDqSlabs = 1; };
template <> struct BwdTileConfig<192> { static constexpr int kBlockM = 64, kBlockN = 64, kWarps = 8, kAtomMSdP = 4, kAtomNKV = 2, kAtomMQ = 2, kDqSlabs = 1; };
template <> struct BwdTileConfig<256> { static constexpr int kBlockM = 64, kBlockN = 64, kWarps = 8, kAtomMSdP = 4, kAtomNKV = 2, kAtomMQ = 2, kDqSlabs = 2; };

// Tile head dims with a Hopper (wgmma) backward kernel (kernels/bwd_traits_sm90.cuh). Its key blocks
// have the same kBlockN as the tiles above, so the host's deterministic chunk plan holds for both.
constexpr bool sm90_bwd_supports(int tile_head_dim) {
    return tile_head_dim == 64 || tile_head_dim == 128 || tile_head_dim == 256;
}
// d256 runs the other schedule (P and dS through shared memory, the consumers split the head dim;
// kernels/bwd_kernel_sm90_pds.cuh): in the keys-as-rows one, dK and dV alone would take 256 fp32
// registers per consumer thread (64 keys x the whole head dim each).
constexpr bool sm90_bwd_pds_schedule(int tile_head_dim) { return tile_head_dim == 256; }

// kBlockN of a tile head dim at run time (0 for a head dim without a tiling).
constexpr int bwd_block_n(int tile_head_dim) {
    switch (tile_head_dim) {
        case 32: return BwdTileConfig<32>::kBlockN;
        case 64: return BwdTileConfig<64>::kBlockN;
        case 96: return BwdTileConfig<96>::kBlockN;
        case 128: return BwdTileConfig<128>::kBlockN;
        case 192: return BwdTileConfig<192>::kBlockN;
        case 256: return BwdTileConfig<256>::kBlockN;
        default: return 0;
    }
}

} // namespace flashattn::cuda::kernels
