// Launch template of the Hopper forward kernel for one (head dim, dtype): grid, shared memory, and
// the choice between the plain and the extras kernel. Compiled for sm_90a only.
#pragma once

#include "fwd_launch.h"
#include "kernels/tile_order.cuh"
#include "kernels/fwd_kernel_sm90.cuh"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace flashattn::cuda {

// The kernel has two forms (fwd_kernel_sm90.cuh): persistent, one CTA per SM looping over tiles
// with a grid stride, and one tile per CTA. Persistence measured 1-8% faster without a mask (the
// next tile's K/V arrive under the epilogue; session 5). Under a causal or local mask the tiles do
// unequal work and a grid stride hands some SMs twice the others' (d256 causal 16k: 342 against
// 533 TFLOP/s per tile), so there one CTA per tile, dispatched by the hardware as SMs free up,
// wins; except at d <= 64, where the tiles are short and persistence measured equal or faster (1k:
// 246 against 214). One CTA per tile runs the one-tile form (fewer registers, fewer spills) in the
// plain kernel; the extras kernel (softcap, ALiBi, dropout) is compiled in one form per head dim
// to bound compile time, persistent up to d128 (then launched one CTA per tile when not persistent).
// FLASHATTN_CUDA_SM90_PERSISTENT (read per call, for A/B timing): 1 = persistent wherever compiled,
// 0 = one CTA per tile, pertile = one CTA per tile running the persistent form.
struct Sm90Grid {
    bool persistent_form; // which kernel form
    bool one_per_tile;    // the grid: one CTA per tile, else one per SM
};

inline Sm90Grid sm90_forward_grid(const FwdArgs& args, int head_dim, bool can_persist, bool extras) {
    bool persistent = can_persist && !(args.mask.is_local() && head_dim > 64);
    bool persistent_form_per_tile = false;
    if (const char* choice = std::getenv("FLASHATTN_CUDA_SM90_PERSISTENT")) {
        if (std::strcmp(choice, "0") == 0) persistent = false;
        if (std::strcmp(choice, "1") == 0) persistent = can_persist;
        if (std::strcmp(choice, "pertile") == 0) persistent = false, persistent_form_per_tile = can_persist;
    }
    if (persistent) return {true, false};
    // One CTA per tile: the one-tile form, except where only the persistent form is compiled.
    return {can_persist && (extras || persistent_form_per_tile), true};
}

inline int64_t sm_count() {
    int device = 0, sms = 0;
    check_cuda(cudaGetDevice(&device), "querying the current device");
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), "querying the SM count");
    return sms;
}

template <typename Traits>
void launch_fwd_sm90(FwdArgs args, cudaStream_t stream) {
    const int64_t tiles = plan_forward_grid<Traits>(args);
    if (tiles == 0) return;
    const bool extras = args.dropout || args.transform_scores;
    const Sm90Grid grid = sm90_forward_grid(args, Traits::kHeadDim, Traits::kCanPersist, extras);
    const int64_t ctas = grid.one_per_tile ? tiles : std::min<int64_t>(tiles, sm_count());
    auto launch = [&](auto kernel) {
        launch_on_grid(kernel, ctas, Traits::kCtaThreads, Traits::kSmemBytes, args, stream, "forward");
    };
    if constexpr (Traits::kCanPersist) {
        if (extras) return launch(kernels::fwd_kernel_sm90<Traits, true, true>);
        if (grid.persistent_form) return launch(kernels::fwd_kernel_sm90<Traits, false, true>);
        return launch(kernels::fwd_kernel_sm90<Traits, false, false>);
    } else {
        if (extras) return launch(kernels::fwd_kernel_sm90<Traits, true, false>);
        return launch(kernels::fwd_kernel_sm90<Traits, false, false>);
    }
}

template <int kHeadDim, fa_dtype kDtype>
void run_fwd_sm90(FwdArgs args, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    using Element = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;
#ifdef FLASHATTN_CUDA_TUNING
    // Tuning builds: $FLASHATTN_CUDA_SM90_BLOCK_N picks the other block width (bf16 only).
    constexpr int kDefaultN = kernels::Sm90FwdTileConfig<kHeadDim>::kBlockN;
    constexpr int kOtherN = kDefaultN == 128 ? 64 : 32;
    if constexpr (kDtype == FA_BFLOAT16) {
        const char* choice = std::getenv("FLASHATTN_CUDA_SM90_BLOCK_N");
        if (choice && std::atoi(choice) == kOtherN)
            return launch_fwd_sm90<kernels::Sm90FwdTraits<kHeadDim, kOtherN, Element>>(args, stream);
    }
#endif
    launch_fwd_sm90<kernels::DefaultSm90FwdTraits<kHeadDim, Element>>(args, stream);
}

} // namespace flashattn::cuda
