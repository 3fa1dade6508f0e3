// The online softmax of one thread's query rows, FlashAttention-2 style: running max and
// unnormalised running sum per row, O rescaled only when the max grows, normalised once at the end.
#pragma once

#include "device/fast_exp2.cuh"

#include <cute/tensor.hpp>

#include <cmath>

namespace flashattn::cuda::kernels {

using namespace cute;

// The four lanes of a quad hold the same accumulator rows (m16n8 layout), so row reductions are
// two butterfly shuffles; no shared memory.
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int kRows>
struct OnlineSoftmax {
    float row_max[kRows]; // of the scores as they enter absorb(), before exp_scale
    float row_sum[kRows]; // this thread's part of sum(exp2(score * exp_scale - max * exp_scale))

    __device__ __forceinline__ OnlineSoftmax() {
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
            row_max[r] = -INFINITY;
            row_sum[r] = 0.0f;
        }
    }

    // Learnable sinks: one more key folded into row r's state, whose score is the sink and whose
    // value is 0 (gpt-oss's sink), out rescaled to the new max as absorb() does. A softmax does not
    // depend on the order of its keys, so this is the state that started at (max, sum, O) = (sink,
    // 1, 0); taken after the last block, it leaves the main loop's state and registers those of the
    // kernel without sinks. finish() then gives the lse with the sink's term, and a row with no
    // allowed key O = 0 and lse = sink. The max is kept in the units of the scores absorb() sees,
    // which exp_scale turns into log2 units, so the sink's natural-log logit is sink * log2(e) /
    // exp_scale there (plain scores: sink / scale; transformed scores: the sink). The quad's four
    // lanes hold parts of the row's sum, which finish() adds: `holds_sum` says whether this lane adds
    // the sink's term.
    template <typename Out>
    __device__ __forceinline__ void absorb_sink(int r, float sink, float exp_scale, bool holds_sum, Out& out) {
        const float sink_max = sink * (1.4426950408889634f / exp_scale);
        const float new_max = fmaxf(row_max[r], sink_max);
        const float max_scaled = new_max == -INFINITY ? 0.0f : new_max * exp_scale; // (as in absorb)
        const float correction = fast_exp2(row_max[r] * exp_scale - max_scaled);
        row_max[r] = new_max;
        row_sum[r] = row_sum[r] * correction + (holds_sum ? fast_exp2(sink_max * exp_scale - max_scaled) : 0.0f);
        CUTE_UNROLL
        for (int c = 0; c < size<1>(out); ++c) out(r, c) *= correction;
    }

    // Fold one K/V block's scores (rows x keys, masked entries -inf) into the running state:
    // scores become the unnormalised probabilities exp2(s * exp_scale - max * exp_scale) that P.V
    // uses, and out (rows x head_dim) is rescaled to the new max. exp_scale > 0 folds the softmax
    // scale and log2(e) into one FFMA per score.
    template <typename Scores, typename Out>
    __device__ __forceinline__ void absorb(Scores& scores, Out& out, float exp_scale) {
        static_assert(decltype(size<0>(scores))::value == kRows);
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
            float block_max = row_max[r];
            CUTE_UNROLL
            for (int c = 0; c < size<1>(scores); ++c) block_max = fmaxf(block_max, scores(r, c));
            block_max = quad_max(block_max);
            // A row with no allowed key so far keeps max -inf; subtracting 0 then keeps exp2 at 0
            // instead of producing NaN from (-inf) - (-inf).
            const float max_scaled = block_max == -INFINITY ? 0.0f : block_max * exp_scale;
            const float correction = fast_exp2(row_max[r] * exp_scale - max_scaled);
            row_max[r] = block_max;
            row_sum[r] *= correction;
            CUTE_UNROLL
            for (int c = 0; c < size<1>(out); ++c) out(r, c) *= correction;
            float block_sum = 0.0f;
            CUTE_UNROLL
            for (int c = 0; c < size<1>(scores); ++c) {
                const float p = fast_exp2(fmaf(scores(r, c), exp_scale, -max_scaled));
                scores(r, c) = p;
                block_sum += p;
            }
            row_sum[r] += block_sum;
        }
    }

    // The same in two halves, for kernels whose P V product of the previous block is still running
    // when the next block's scores arrive (fwd_kernel_sm90.cuh): absorb_scores updates the state and
    // the scores and returns each row's correction; rescale applies it to out once the product is
    // done.
    //
    // kMaxSlack > 0: the running max moves only when a block's exceeds it by more than kMaxSlack
    // (log2 units, after exp_scale). Below that the block's probabilities are at most 2^kMaxSlack
    // instead of 1 (as exact in fp32 sums and in 16-bit P, whose rounding is relative), the
    // correction is exactly 1, so O needs no rescale, and finish() divides by the sum
    // taken against the same max: the same result. Past the first block a row's max then rarely
    // moves, where without the slack each new maximum of any of a warp's rows costs the multiplies.
    template <int kMaxSlack = 0, typename Scores>
    __device__ __forceinline__ void absorb_scores(Scores& scores, float exp_scale, float (&correction)[kRows]) {
        static_assert(decltype(size<0>(scores))::value == kRows);
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
            float block_max = row_max[r];
            CUTE_UNROLL
            for (int c = 0; c < size<1>(scores); ++c) block_max = fmaxf(block_max, scores(r, c));
            block_max = quad_max(block_max);
            // (A row at -inf so far: -inf - -inf is NaN, the test fails and the max moves.)
            if constexpr (kMaxSlack > 0) {
                if ((block_max - row_max[r]) * exp_scale <= float(kMaxSlack)) block_max = row_max[r];
            }
            const float max_scaled = block_max == -INFINITY ? 0.0f : block_max * exp_scale;
            // With the slack a kept max gives exactly 1: the exponent below is contracted into an FMA,
            // whose result for an unchanged max is the rounding error of max * exp_scale, not 0.
            correction[r] = kMaxSlack > 0 && block_max == row_max[r] ? 1.0f
                                                                      : fast_exp2(row_max[r] * exp_scale - max_scaled);
            row_max[r] = block_max;
            float block_sum = 0.0f;
            CUTE_UNROLL
            for (int c = 0; c < size<1>(scores); ++c) {
                const float p = fast_exp2(fmaf(scores(r, c), exp_scale, -max_scaled));
                scores(r, c) = p;
                block_sum += p;
            }
            row_sum[r] = row_sum[r] * correction[r] + block_sum;
        }
    }
    template <typename Out>
    __device__ __forceinline__ static void rescale(Out& out, const float (&correction)[kRows]) {
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
            CUTE_UNROLL
            for (int c = 0; c < size<1>(out); ++c) out(r, c) *= correction[r];
        }
    }
    // rescale(), skipped by the whole warp (all 32 lanes call it) where no row's correction differs
    // from 1: a multiply by 1 changes nothing. The corrections are exactly 1 where absorb_scores kept
    // a row's max under its slack; without one, a computed exp2 of an unchanged max is a few ulps
    // off 1 (an FMA's rounding), so the skip is rare there.
    template <typename Out>
    __device__ __forceinline__ static void rescale_unless_all_one(Out& out, const float (&correction)[kRows]) {
        bool needed = false;
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) needed |= correction[r] != 1.0f;
        if (__any_sync(0xffffffffu, needed)) rescale(out, correction);
    }

    // rescale_unless_all_one() after wait(), the wait for the product that writes out, placed in
    // both arms of the branch on the vote, which also needs every row's sum and so every exponential
    // of the block (the sums are never negative: the test is for the dependency, not its outcome).
    // ptxas does not hoist a wait above a branch, so the softmax runs under the product; without
    // the branch it placed the wait where its register allocation suited it, with Q in registers
    // (fwd_kernel_sm90.cuh) above all 66 exponentials of a d128 block, which cost 3%.
    template <typename Out, typename Wait>
    __device__ __forceinline__ void rescale_after(Out& out, const float (&correction)[kRows], Wait&& wait) const {
        bool needed = false;
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) needed |= correction[r] != 1.0f || !(row_sum[r] >= 0.0f);
        if (__any_sync(0xffffffffu, needed)) {
            wait();
            rescale(out, correction);
        } else {
            wait();
        }
    }

    // Normalise out (times out_scale, the dropout rescale) and return each row's natural-log lse:
    // -inf, with out = 0, for a row that saw no allowed key (with a sink, absorb_sink: lse = the
    // sink, out = 0). poison (an index of the sequence was out of range, device_faults.h): NaN in
    // every element and every lse, through the factor each row is scaled by anyway, so the rare
    // case costs a select per row and not one per element.
    template <typename Out>
    __device__ __forceinline__ void finish(Out& out, float exp_scale, float out_scale, float (&lse)[kRows],
                                           bool poison = false) {
        constexpr float kLn2 = 0.6931471805599453f;
        const float nan = __int_as_float(0x7fffffff);
        CUTE_UNROLL
        for (int r = 0; r < kRows; ++r) {
            const float sum = quad_sum(row_sum[r]);
            const bool empty = !(sum > 0.0f);
            const float factor = poison ? nan : empty ? 0.0f : __fdividef(out_scale, sum); // (sum < 2^126)
            CUTE_UNROLL
            for (int c = 0; c < size<1>(out); ++c) out(r, c) *= factor;
            lse[r] = poison ? nan : empty ? -INFINITY : (row_max[r] * exp_scale + __log2f(sum)) * kLn2;
        }
    }
};

} // namespace flashattn::cuda::kernels
