// Merging attention computed over disjoint key sets by their logsumexp (docs/semantics.md,
// "Combining partial results"): fa_combine on both backends, split-KV's combine, and the decode
// kernel's warps, which split a CTA's keys. One definition, compiled for the host and the device.
//
// In log2 units (lse2 = lse * log2(e)), so that each term is one exponential (on the GPU one ex2
// instruction): with M = max lse2_s over the non-empty splits,
//     lse2 = M + log2(sum_s 2^(lse2_s - M)),    weight_s = 2^(lse2_s - lse2),    out = sum_s weight_s O_s.
// A split with lse = -inf saw no key: it weighs 0 and its O_s is never needed. A NaN lse (a split
// of a faulted sequence, src/cuda/device/device_faults.h) makes the merged row NaN: max and the
// weights would otherwise drop it.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define FA_LSE_HD __host__ __device__ __forceinline__
#else
#define FA_LSE_HD inline
#endif

namespace flashattn {

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// 2^x: on the GPU the SFU's ex2.approx (flush-to-zero), one instruction; on the host exp2f.
FA_LSE_HD float lse_exp2(float x) {
#if defined(__CUDA_ARCH__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

// A running (max, sum of 2^(x - max)) over logsumexps in log2 units; sets merge in any order.
struct LseSum {
    float max = -INFINITY, sum = 0.0f;
    bool nan = false;

    // Another running sum (a split's own lse2 is the pair (lse2, 1)).
    FA_LSE_HD void add(float max2, float sum2, bool nan2 = false) {
        nan = nan || nan2 || max2 != max2;
        const float m = max > max2 ? max : max2; // (a NaN max2 is dropped here, kept in `nan`)
        if (!(m > -INFINITY)) return;
        sum = (max > -INFINITY ? sum * lse_exp2(max - m) : 0.0f) + (max2 > -INFINITY ? sum2 * lse_exp2(max2 - m) : 0.0f);
        max = m;
    }
    FA_LSE_HD void add(float lse2) { add(lse2, 1.0f); }

    // The merged lse2: -inf when every split was empty, NaN when any was NaN.
    FA_LSE_HD float lse2() const {
        if (nan) return NAN;
        return max > -INFINITY ? max + log2f(sum) : -INFINITY;
    }
    // A split's weight in the merged output, given the merged lse2 (0 for an empty split; NaN when
    // the merge is NaN).
    FA_LSE_HD static float weight(float split_lse2, float merged_lse2) {
        if (merged_lse2 != merged_lse2) return NAN;
        return split_lse2 > -INFINITY ? lse_exp2(split_lse2 - merged_lse2) : 0.0f;
    }
};

// The merged lse2 of N logsumexps held at once (the decode kernel's warps): the max, then one sum, so
// that the N exponentials do not wait for each other as the running form's do.
template <int N>
FA_LSE_HD float merged_lse2(const float (&lse2)[N]) {
    float max = -INFINITY;
    bool nan = false;
    for (int i = 0; i < N; ++i) {
        nan = nan || lse2[i] != lse2[i];
        max = lse2[i] > max ? lse2[i] : max;
    }
    if (nan) return NAN;
    if (!(max > -INFINITY)) return -INFINITY;
    float sum = 0.0f;
    for (int i = 0; i < N; ++i) sum += lse_exp2(lse2[i] - max); // 2^-inf = 0
    return max + log2f(sum);
}

} // namespace flashattn
