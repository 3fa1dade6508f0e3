// The dropout generator every backend shares: Philox4x32-10 itself (Random123's published
// known-answer vectors), the keep threshold, and the (b, h, i, j) -> counter mapping of philox.h.
#include <flashattn/philox.h>
#include <gtest/gtest.h>

#include <cmath>

namespace flashattn {
namespace {

void expect_bits(PhiloxBits actual, uint32_t x, uint32_t y, uint32_t z, uint32_t w) {
    EXPECT_EQ(actual.x, x);
    EXPECT_EQ(actual.y, y);
    EXPECT_EQ(actual.z, z);
    EXPECT_EQ(actual.w, w);
}

TEST(Philox, MatchesRandom123KnownAnswerVectors) {
    expect_bits(philox4x32_10({0, 0, 0, 0}, 0, 0), 0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u);
    expect_bits(philox4x32_10({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu),
                0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu);
    expect_bits(philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u, 0x299f31d0u),
                0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u);
}

TEST(Philox, KeepThresholdIsTheKeepProbabilityTimesTwoToThe32) {
    EXPECT_EQ(dropout_keep_threshold(0.0f), 0xFFFFFFFFu);
    EXPECT_EQ(dropout_keep_threshold(0.5f), 0x80000000u);
    EXPECT_EQ(dropout_keep_threshold(0.75f), 0x40000000u);
    const double p = 0.1f;
    EXPECT_NEAR(double(dropout_keep_threshold(0.1f)), (1.0 - p) * 4294967296.0, 1.0);
}

TEST(Philox, DropoutRowMapsElementsToCountersAsDocumented) {
    const uint64_t seed = 0x0123456789abcdefull, offset = 0xfedcba9876543210ull;
    const int64_t batch = 3, heads = 5, head = 2, row = 77;
    const DropoutRow rng(seed, offset, batch, heads, head, row);
    const uint32_t key0 = 0x89abcdefu, key1 = 0x01234567u ^ 0xfedcba98u;
    for (int64_t column : {0, 1, 2, 3, 4, 9, 1000, 4095}) {
        const PhiloxBits expected = philox4x32_10(
            {uint32_t(column / 4), uint32_t(row), uint32_t(batch * heads + head), 0x76543210u}, key0, key1);
        const uint32_t words[4] = {expected.x, expected.y, expected.z, expected.w};
        EXPECT_EQ(rng.bits_for_column(column), words[column % 4]) << "column " << column;
    }
}

TEST(Philox, KeptFractionFollowsTheProbability) {
    for (float p : {0.1f, 0.5f, 0.9f}) {
        const uint32_t threshold = dropout_keep_threshold(p);
        int64_t kept = 0, total = 0;
        for (int64_t row = 0; row < 64; ++row) {
            const DropoutRow rng(42, 0, 0, 1, 0, row);
            for (int64_t column = 0; column < 1024; ++column, ++total) kept += rng.bits_for_column(column) < threshold;
        }
        EXPECT_NEAR(double(kept) / double(total), 1.0 - p, 0.01) << "p = " << p;
    }
}

} // namespace
} // namespace flashattn
