// The SIMD vector of the ISA being compiled and the handful of operations the kernels need.
//
// Written once with GCC/Clang vector extensions: the same code becomes SSE2, AVX2 or AVX-512
// instructions depending on the target that isa/<name>.cpp switches on (FA_CPU_VECTOR_BYTES says
// the width). A few leaves spell out intrinsics, each with a portable fallback, where GCC's code for
// the portable spelling is poor: broadcast and splat (shuffle chains, stack round trips), max and
// min (compare + blend against constants), and mul_high (vector extensions have no widening
// multiply).

constexpr int kLanes = FA_CPU_VECTOR_BYTES / 4;

typedef float Vec __attribute__((vector_size(FA_CPU_VECTOR_BYTES)));
typedef int32_t IVec __attribute__((vector_size(FA_CPU_VECTOR_BYTES)));
typedef uint32_t UVec __attribute__((vector_size(FA_CPU_VECTOR_BYTES)));
typedef uint16_t HalfBits __attribute__((vector_size(FA_CPU_VECTOR_BYTES / 2))); // kLanes x 16 bits

constexpr float kInf = __builtin_inff();
constexpr float kLog2e = 1.44269504088896340736f;
constexpr float kLn2 = 0.69314718055994530942f;

FA_INLINE Vec load(const float* p) {
    Vec v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}
FA_INLINE void store(float* p, Vec v) { __builtin_memcpy(p, &v, sizeof v); }
FA_INLINE IVec load(const int32_t* p) {
    IVec v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}
FA_INLINE void store(int32_t* p, IVec v) { __builtin_memcpy(p, &v, sizeof v); }

FA_INLINE Vec broadcast(const float* p) {
#if FA_CPU_VECTOR_BYTES == 64
    return (Vec)_mm512_set1_ps(*p);
#elif FA_CPU_VECTOR_BYTES == 32
    return (Vec)_mm256_broadcast_ss(p);
#elif defined(__SSE__)
    return (Vec)_mm_load1_ps(p);
#else
    Vec v;
    for (int i = 0; i < kLanes; ++i) v[i] = *p;
    return v;
#endif
}
// A value in every lane. Not broadcast(&x): that would send every constant through a stack slot.
FA_INLINE Vec splat(float x) {
#if FA_CPU_VECTOR_BYTES == 64
    return (Vec)_mm512_set1_ps(x);
#elif FA_CPU_VECTOR_BYTES == 32
    return (Vec)_mm256_set1_ps(x);
#elif defined(__SSE__)
    return (Vec)_mm_set1_ps(x);
#else
    Vec v;
    for (int i = 0; i < kLanes; ++i) v[i] = x;
    return v;
#endif
}

// The high 32 bits of a[i] * k (Philox's mulhi). Vector extensions have no widening multiply, so
// the even and odd lanes go through the ISA's 32x32->64 multiply and are merged.
FA_INLINE UVec mul_high(UVec a, uint32_t k) {
#if FA_CPU_VECTOR_BYTES == 64
    const __m512i va = (__m512i)a, vk = _mm512_set1_epi32(static_cast<int>(k));
    const __m512i even = _mm512_srli_epi64(_mm512_mul_epu32(va, vk), 32);
    const __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(va, 32), vk);
    return (UVec)_mm512_mask_blend_epi32(0xAAAA, even, odd);
#elif FA_CPU_VECTOR_BYTES == 32
    const __m256i va = (__m256i)a, vk = _mm256_set1_epi32(static_cast<int>(k));
    const __m256i even = _mm256_srli_epi64(_mm256_mul_epu32(va, vk), 32);
    const __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(va, 32), vk);
    return (UVec)_mm256_blend_epi32(even, odd, 0xAA);
#elif defined(__SSE2__)
    const __m128i va = (__m128i)a, vk = _mm_set1_epi32(static_cast<int>(k));
    const __m128i even = _mm_srli_epi64(_mm_mul_epu32(va, vk), 32);
    const __m128i odd = _mm_mul_epu32(_mm_srli_epi64(va, 32), vk);
    return (UVec)_mm_or_si128(even, _mm_and_si128(odd, _mm_set_epi32(-1, 0, -1, 0)));
#else
    UVec high;
    for (int i = 0; i < kLanes; ++i) high[i] = static_cast<uint32_t>((static_cast<uint64_t>(a[i]) * k) >> 32);
    return high;
#endif
}
FA_INLINE IVec splat_int(int32_t x) { return IVec{} + x; }

FA_INLINE IVec lane_index() {
    IVec v;
    for (int i = 0; i < kLanes; ++i) v[i] = i;
    return v;
}

// a > b ? a : b, which is exactly vmaxps' rule (NaN and equal operands give b). Spelled as the
// instruction because GCC turns the portable form into compare + blend when b is a constant.
FA_INLINE Vec max(Vec a, Vec b) {
#if FA_CPU_VECTOR_BYTES == 64
    return (Vec)_mm512_max_ps((__m512)a, (__m512)b);
#elif FA_CPU_VECTOR_BYTES == 32
    return (Vec)_mm256_max_ps((__m256)a, (__m256)b);
#elif defined(__SSE__)
    return (Vec)_mm_max_ps((__m128)a, (__m128)b);
#else
    return a > b ? a : b;
#endif
}
FA_INLINE Vec min(Vec a, Vec b) {
#if FA_CPU_VECTOR_BYTES == 64
    return (Vec)_mm512_min_ps((__m512)a, (__m512)b);
#elif FA_CPU_VECTOR_BYTES == 32
    return (Vec)_mm256_min_ps((__m256)a, (__m256)b);
#elif defined(__SSE__)
    return (Vec)_mm_min_ps((__m128)a, (__m128)b);
#else
    return a < b ? a : b;
#endif
}
FA_INLINE Vec select(IVec mask, Vec yes, Vec no) { return mask ? yes : no; }
FA_INLINE Vec abs(Vec x) { return (Vec)((UVec)x & 0x7fffffffu); }

// 2^x within 2 ulp for x < 127.5 (inf above); 0 for x <= -127 (so exp2(-inf) is exactly 0: masked scores
// contribute nothing, not a denormal). Split x = n + f with n integer and |f| <= 1/2, evaluate a
// degree-6 minimax polynomial for 2^f and put n in the exponent bits. Adding 1.5 * 2^23 + 127
// rounds x to an integer and leaves n + 127 in the low mantissa bits, so one shift moves the biased
// exponent into place.
FA_INLINE Vec exp2(Vec x) {
    const Vec round_magic = splat(12582912.0f + 127.0f);
    x = min(max(x, splat(-127.0f)), splat(128.0f));
    const Vec shifted = x + round_magic;
    const Vec f = x - (shifted - round_magic);
    Vec p = splat(1.534581243e-04f);
    p = p * f + splat(1.339993090e-03f);
    p = p * f + splat(9.618489072e-03f);
    p = p * f + splat(5.550328642e-02f);
    p = p * f + splat(2.402264625e-01f);
    p = p * f + splat(6.931471825e-01f);
    p = p * f + splat(1.0f);
    return p * (Vec)((UVec)shifted << 23); // 2^n; n = -127 gives the bits of 0.0
}

// tanh within 3 ulp: an odd Taylor polynomial near 0 (where 1 - 2/(e^2x + 1) would cancel) and
// (1 - e^-2|x|) / (1 + e^-2|x|) elsewhere.
FA_INLINE Vec tanh(Vec x) {
    const Vec a = abs(x);
    const Vec x2 = x * x;
    Vec p = splat(21844.0f / 6081075.0f);
    p = p * x2 - splat(1382.0f / 155925.0f);
    p = p * x2 + splat(62.0f / 2835.0f);
    p = p * x2 - splat(17.0f / 315.0f);
    p = p * x2 + splat(2.0f / 15.0f);
    p = p * x2 - splat(1.0f / 3.0f);
    const Vec small = x + x * x2 * p;
    const Vec e = exp2(a * splat(-2.0f * kLog2e));
    const Vec large = (splat(1.0f) - e) / (splat(1.0f) + e);
    const Vec signed_large = (Vec)((UVec)large | ((UVec)x & 0x80000000u));
    return select(a < splat(0.4f), small, signed_large);
}

FA_INLINE UVec widen(HalfBits h) { return __builtin_convertvector(h, UVec); }

// bfloat16 is the top half of a float.
FA_INLINE Vec bf16_to_float(HalfBits h) { return (Vec)(widen(h) << 16); }

// fp16: moving exponent+mantissa into float position and multiplying by 2^112 (the exponent bias
// difference) is exact for normal and subnormal numbers alike; inf/NaN get the float exponent.
FA_INLINE Vec fp16_to_float(HalfBits h) {
    const UVec bits = widen(h);
    const UVec magnitude = (bits & 0x7fffu) << 13;
    const Vec scaled = (Vec)magnitude * splat(0x1p112f);
    const IVec is_special = (IVec)((bits & 0x7c00u) == 0x7c00u);
    const UVec value = is_special ? (magnitude | 0x7f800000u) : (UVec)scaled;
    return (Vec)(value | ((bits & 0x8000u) << 16));
}

// Round to nearest even, NaN kept quiet: the same as flashattn::float_to_bf16.
FA_INLINE HalfBits float_to_bf16(Vec x) {
    const UVec bits = (UVec)x;
    const UVec rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
    const IVec is_nan = (IVec)((bits & 0x7fffffffu) > 0x7f800000u);
    const UVec result = is_nan ? ((bits >> 16) | 0x40u) : rounded;
    return __builtin_convertvector(result, HalfBits);
}
