// Launch of the Hopper backward kernel for one (tile head dim, dtype, value head dim): the schedule of
// the head dims (keys as rows at d64/d128, P and dS through shared memory at d256 and 192 / 128:
// Sm90BwdTraitsFor) and the
// plain or the extras (softcap, ALiBi) kernel, the plain one also as the GQA group walk. No dropout
// (the planner routes it to the mma.sync kernel). Compiled for sm_90a only.
#pragma once

#include "host/grid_launch.h"
#include "host/launch.h"
#include "kernels/backward_sm90/bwd_kernel_sm90.cuh"
#include "kernels/backward_sm90/bwd_kernel_sm90_pds.cuh"
#include "kernels/backward_sm90/bwd_params_sm90.cuh"
#include "kernels/tiles.h"

#include <type_traits>

namespace flashattn::cuda {

template <int kTileDim, fa_dtype kDtype, int kTileDimV>
void run_backward_sm90(const BwdArgs& args, int64_t ctas, cudaStream_t stream) {
    static_assert(kDtype == FA_FLOAT16 || kDtype == FA_BFLOAT16);
    using Element = std::conditional_t<kDtype == FA_FLOAT16, cutlass::half_t, cutlass::bfloat16_t>;
    using Traits = kernels::Sm90BwdTraitsFor<kTileDim, Element, kTileDimV>;
    if constexpr (kTileDimV != kTileDim) {
        if (args.fwd.head_dim != kTileDim || args.fwd.head_dim_v != kTileDimV)
            fail(FA_ERROR_INTERNAL, "the sm90 backward of head dims ", kTileDim, " / ", kTileDimV, " got ",
                 args.fwd.head_dim, " / ", args.fwd.head_dim_v);
    }
    if (args.fwd.dropout) fail(FA_ERROR_INTERNAL, "the sm90 backward has no dropout (the planner routes it elsewhere)");
    // kGroupWalk (a grid over KV heads whose CTAs walk the group's query heads) only in the plain
    // kernel: the planner gives GQA with softcap or ALiBi the dK/dV scratch.
    const bool walk = args.group_heads > 1;
    if (walk && args.fwd.transform_scores) fail(FA_ERROR_INTERNAL, "the sm90 backward walks GQA groups without softcap/ALiBi only");
    // The ordered dQ (deterministic mode): its own instances of the plain kernel, one key block per
    // CTA, and at d128 and d256 also on the group walk.
    const bool ordered = args.dq_semaphore != nullptr;
    // Its counters count the kernel's query blocks (the dsum kernel zeroes them by the same height).
    if (ordered && args.dq_semaphore_rows != Traits::kBlockM)
        fail(FA_ERROR_INTERNAL, "the ordered dQ's counters count blocks of ", args.dq_semaphore_rows,
             " query rows, its kernel's blocks have ", Traits::kBlockM);
    if (ordered && (args.fwd.transform_scores || args.num_chunks != args.num_n_blocks ||
                    !tiles::backward_sm90_ordered_dq(kTileDim, kTileDimV) ||
                    (walk && !tiles::backward_sm90_ordered_walk(kTileDim, kTileDimV))))
        fail(FA_ERROR_INTERNAL, "the sm90 backward orders dQ at tile head dims 64, 128, 256 and 192 / 128 (on the GQA "
                                "walk at 128 and 256), without softcap/ALiBi, one key block per CTA");
    // One kernel per (extras, group walk, ordered dQ) in the head dim's schedule; the ordered
    // instance exists only where tiles.h names it.
    auto run = [&](auto extras, auto group_walk, auto ordered_dq) {
        constexpr bool kExtras = decltype(extras)::value, kWalk = decltype(group_walk)::value;
        constexpr bool kOrdered = decltype(ordered_dq)::value;
        const Sm90BwdParams params = sm90_backward_params<Traits>(args, kDtype == FA_BFLOAT16);
        auto launch = [&](auto kernel) {
            launch_on_grid(kernel, ctas, Traits::kThreads, Traits::kSmemBytes, params, stream, "backward");
        };
        if constexpr (Traits::kPdSSchedule) {
            launch(kernels::bwd_kernel_sm90_pds<Traits, kExtras, kWalk, kOrdered>);
        } else {
            launch(kernels::bwd_kernel_sm90<Traits, kExtras, kWalk, kOrdered>);
        }
    };
    using std::false_type, std::true_type;
    if constexpr (tiles::backward_sm90_ordered_walk(kTileDim, kTileDimV)) {
        if (ordered && walk) return run(false_type{}, true_type{}, true_type{});
    }
    if constexpr (tiles::backward_sm90_ordered_dq(kTileDim, kTileDimV)) {
        if (ordered) return run(false_type{}, false_type{}, true_type{});
    }
    if (args.fwd.transform_scores) {
        run(true_type{}, false_type{}, false_type{});
    } else if (walk) {
        run(false_type{}, true_type{}, false_type{});
    } else {
        run(false_type{}, false_type{}, false_type{});
    }
}

} // namespace flashattn::cuda
