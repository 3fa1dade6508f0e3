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
template <> struct BwdTileConfig<32> { static constexpr int kBlockM = 128, kBlockN = 128, kWarps = 8, kAtomMSdP = 4, kAtomNKV = 4, kAtomMQ = 4; };
template <> struct BwdTileConfig<64> { static constexpr int kBlockM = 128, kBlockN = 128, kWarps = 8, kAtomMSdP = 4, kAtomNKV = 4, kAtomMQ = 4; };
template <> struct BwdTileConfig<96> { static constexpr int kBlockM = 64, kBlockN = 128, kWarps = 8, kAtomMSdP = 2, kAtomNKV = 4, kAtomMQ = 4; };
template <> struct BwdTileConfig<128> { static constexpr int kBlockM = 64, kBlockN = 128, kWarps = 8, kAtomMSdP = 2, kAtomNKV = 4, kAtomMQ = 2; };
template <> struct BwdTileConfig<192> { static constexpr int kBlockM = 64, kBlockN = 64, kWarps = 8, kAtomMSdP = 4, kAtomNKV = 2, kAtomMQ = 2; };
template <> struct BwdTileConfig<256> { static constexpr int kBlockM = 64, kBlockN = 64, kWarps = 8, kAtomMSdP = 4, kAtomNKV = 2, kAtomMQ = 2; };

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
