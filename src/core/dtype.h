// Scalar conversions between the storage dtypes and float, bit-exact and portable (no F16C or
// AVX512-BF16 needed). Round-to-nearest-even, NaN preserved. The CPU backend's vector kernels use
// faster forms of the same functions; these are the definition they are tested against.
#pragma once

#include <flashattn/flashattn.h>

#include <cstdint>
#include <cstring>

namespace flashattn {

inline float bf16_to_float(uint16_t h) {
    const uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t float_to_bf16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u); // quiet NaN
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return static_cast<uint16_t>(bits >> 16);
}

inline float fp16_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exponent = (h >> 10) & 0x1fu;
    uint32_t mantissa = h & 0x3ffu;
    uint32_t bits;
    if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent == 0) {
        if (mantissa == 0) {
            bits = sign;
        } else { // subnormal: normalise
            int shift = 0;
            while ((mantissa & 0x400u) == 0) { mantissa <<= 1; ++shift; }
            mantissa &= 0x3ffu;
            bits = sign | ((127 - 15 - shift + 1) << 23) | (mantissa << 13);
        }
    } else {
        bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

inline uint16_t float_to_fp16(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
    const uint32_t abs = bits & 0x7fffffffu;
    if (abs > 0x7f800000u) return sign | 0x7e00u;           // NaN
    if (abs >= 0x477ff000u) return sign | 0x7c00u;          // overflow (rounds to) inf
    if (abs < 0x38800000u) {                                 // fp16 subnormal or zero
        if (abs < 0x33000000u) return sign;                  // below half the smallest subnormal
        const uint32_t mantissa = (abs & 0x7fffffu) | 0x800000u;
        const int shift = 126 - static_cast<int>(abs >> 23); // 14..24
        const uint32_t half_ulp = 1u << (shift - 1);
        uint32_t result = mantissa >> shift;
        const uint32_t rest = mantissa & ((1u << shift) - 1);
        if (rest > half_ulp || (rest == half_ulp && (result & 1u))) ++result;
        return sign | static_cast<uint16_t>(result);
    }
    uint32_t result = ((abs >> 13) - ((127 - 15) << 10));
    const uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (result & 1u))) ++result;
    return sign | static_cast<uint16_t>(result);
}

inline float load_float(const void* base, fa_dtype dtype, int64_t index) {
    switch (dtype) {
        case FA_FLOAT16: return fp16_to_float(static_cast<const uint16_t*>(base)[index]);
        case FA_BFLOAT16: return bf16_to_float(static_cast<const uint16_t*>(base)[index]);
        default: return static_cast<const float*>(base)[index];
    }
}

inline void store_float(void* base, fa_dtype dtype, int64_t index, float value) {
    switch (dtype) {
        case FA_FLOAT16: static_cast<uint16_t*>(base)[index] = float_to_fp16(value); break;
        case FA_BFLOAT16: static_cast<uint16_t*>(base)[index] = float_to_bf16(value); break;
        default: static_cast<float*>(base)[index] = value; break;
    }
}

// Round a float to what the dtype can hold (used to emulate same-precision naive attention).
inline float round_to(fa_dtype dtype, float value) {
    switch (dtype) {
        case FA_FLOAT16: return fp16_to_float(float_to_fp16(value));
        case FA_BFLOAT16: return bf16_to_float(float_to_bf16(value));
        default: return value;
    }
}

inline int64_t dtype_size(fa_dtype dtype) { return dtype == FA_FLOAT32 ? 4 : 2; }

inline const char* dtype_name(fa_dtype dtype) {
    switch (dtype) {
        case FA_FLOAT16: return "float16";
        case FA_BFLOAT16: return "bfloat16";
        case FA_FLOAT32: return "float32";
    }
    return "unknown";
}

} // namespace flashattn
