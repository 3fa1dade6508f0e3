// 2^x on the SFU (ex2.approx, flush-to-zero): one instruction. The softmax and the combine fold
// log2(e) into their scales so that every exponential is one of these.
#pragma once

namespace flashattn::cuda::kernels {

__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

} // namespace flashattn::cuda::kernels
