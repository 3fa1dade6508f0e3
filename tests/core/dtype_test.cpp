// The scalar dtype conversions (core/dtype.h) that the reference, the CPU backend and the tests use
// to read and write fp16/bf16: round-to-nearest-even, NaN kept, exact round trips.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace flashattn {
namespace {

uint32_t bits_of(float f) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    return b;
}
float float_of(uint32_t b) {
    float f;
    std::memcpy(&f, &b, 4);
    return f;
}

TEST(DtypeConversion, EveryHalfValueRoundTripsExactly) {
    for (uint32_t h = 0; h < 0x10000u; ++h) {
        const float f16 = fp16_to_float(uint16_t(h));
        const float b16 = bf16_to_float(uint16_t(h));
        if (std::isnan(f16)) {
            EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(f16)))) << std::hex << h;
        } else {
            ASSERT_EQ(float_to_fp16(f16), h) << std::hex << h;
            ASSERT_EQ(float(_Float16(f16)), f16) << "fp16_to_float disagrees with the compiler at " << std::hex << h;
        }
        if (std::isnan(b16)) EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(b16))));
        else ASSERT_EQ(float_to_bf16(b16), h) << std::hex << h;
    }
}

TEST(DtypeConversion, FloatToHalfRoundsToNearestEvenLikeTheCompiler) {
    std::mt19937 rng(7);
    for (int n = 0; n < 2000000; ++n) {
        uint32_t b = rng();
        // Bias toward fp16's range (exponents around 2^-26 .. 2^17) so subnormals, overflow and ties get hit.
        if (n % 2) b = (b & 0x807fffffu) | (uint32_t(100 + (b >> 8) % 48) << 23);
        if (n % 7 == 0) b &= 0xffffe000u | 0x1000u; // exact ties between two fp16 values
        const float f = float_of(b);
        if (std::isnan(f)) continue;
        const _Float16 expected = _Float16(f);
        uint16_t expected_bits;
        std::memcpy(&expected_bits, &expected, 2);
        ASSERT_EQ(float_to_fp16(f), expected_bits) << "float bits 0x" << std::hex << b;
    }
}

TEST(DtypeConversion, FloatToBfloat16RoundsToNearestEven) {
    std::mt19937 rng(11);
    for (int n = 0; n < 1000000; ++n) {
        uint32_t b = rng();
        if (n % 5 == 0) b = (b & 0xffff0000u) | 0x8000u; // exact tie
        const float f = float_of(b);
        if (std::isnan(f) || std::isinf(f)) continue;
        const uint16_t r = float_to_bf16(f);
        const double value = bf16_to_float(r);
        const uint16_t truncated = uint16_t(b >> 16);
        // The answer is one of the two bf16 values around f, the nearer, the even one on a tie.
        const double below = bf16_to_float(truncated);
        double above = bf16_to_float(uint16_t(truncated + 1));
        // Past the largest finite value, IEEE rounding acts as if the next value were 2^128.
        const double beyond = std::isinf(above) ? std::copysign(std::ldexp(1.0, 128), above) : above;
        const double d_below = std::fabs(double(f) - below), d_above = std::fabs(double(f) - beyond);
        const double expected = d_below < d_above ? below : d_above < d_below ? above : (truncated & 1 ? above : below);
        ASSERT_EQ(value, expected) << "float bits 0x" << std::hex << b;
    }
}

TEST(DtypeConversion, SpecialValues) {
    EXPECT_EQ(float_to_fp16(65504.0f), 0x7bffu);
    EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00u);          // rounds to +inf
    EXPECT_EQ(float_to_fp16(-INFINITY), 0xfc00u);
    EXPECT_EQ(float_to_fp16(-0.0f), 0x8000u);
    EXPECT_EQ(float_to_fp16(5.9604645e-8f), 0x0001u);     // smallest subnormal
    EXPECT_EQ(float_to_fp16(2.9802322e-8f), 0x0000u);     // half of it: tie to even (zero)
    EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(NAN))));
    EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(float_of(0x7f800001u))))); // signalling NaN stays NaN
    EXPECT_EQ(float_to_bf16(INFINITY), 0x7f80u);
    EXPECT_EQ(round_to(FA_FLOAT32, 0.1f), 0.1f);
    EXPECT_EQ(bits_of(round_to(FA_BFLOAT16, 1.0f + 1.0f / 256)), bits_of(1.0f)); // tie to even
}

} // namespace
} // namespace flashattn
