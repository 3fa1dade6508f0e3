/*
 * Dropout randomness, defined once for every backend.
 *
 * Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11) is a
 * counter-based generator: the random bits of an element are a pure function of (key, counter), so
 * the CPU backend, the CUDA kernels, the forward and the backward all regenerate exactly the same
 * dropout mask without storing it, in any order and on any number of threads.
 *
 * Mapping of attention element (b, h, i, j) -- batch (sequence in varlen), query head, query row
 * within its sequence, key column within its sequence:
 *   key     = (seed low 32 bits, seed high 32 bits XOR offset high 32 bits)
 *   counter = (j / 4, i, b * num_heads + h, offset low 32 bits)
 *   bits    = word (j % 4) of philox(counter, key)
 *   kept    = bits < keep_threshold(dropout_p)
 * One generator call serves four neighbouring columns, which is how the kernels consume it.
 */
#ifndef FLASHATTN_PHILOX_H
#define FLASHATTN_PHILOX_H

#include <stdint.h>

#if defined(__CUDACC__) || defined(__HIPCC__)
#define FA_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define FA_HOST_DEVICE inline
#endif

#ifdef __cplusplus
namespace flashattn {

struct PhiloxBits {
    uint32_t x, y, z, w;
};

FA_HOST_DEVICE void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
#if defined(__CUDA_ARCH__)
    hi = __umulhi(a, b);
    lo = a * b;
#else
    const uint64_t product = static_cast<uint64_t>(a) * b;
    hi = static_cast<uint32_t>(product >> 32);
    lo = static_cast<uint32_t>(product);
#endif
}

FA_HOST_DEVICE PhiloxBits philox4x32_10(PhiloxBits counter, uint32_t key0, uint32_t key1) {
    constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
    constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int round = 0; round < 10; ++round) {
        uint32_t hi0, lo0, hi1, lo1;
        philox_mulhilo(kMul0, counter.x, hi0, lo0);
        philox_mulhilo(kMul1, counter.z, hi1, lo1);
        counter = PhiloxBits{hi1 ^ counter.y ^ key0, lo1, hi0 ^ counter.w ^ key1, lo0};
        key0 += kWeyl0;
        key1 += kWeyl1;
    }
    return counter;
}

/* Elements whose 32 random bits fall under this threshold are kept. p = 0 keeps everything. */
FA_HOST_DEVICE uint32_t dropout_keep_threshold(float dropout_p) {
    const double keep = 1.0 - static_cast<double>(dropout_p);
    const double scaled = keep * 4294967296.0;
    return scaled >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<uint32_t>(scaled);
}

/* The generator state of one (sequence, head, query row): four key columns per call. */
struct DropoutRow {
    uint32_t key0, key1, head_index, offset_lo, row;

    FA_HOST_DEVICE DropoutRow(uint64_t seed, uint64_t offset, int64_t batch, int64_t num_heads,
                              int64_t head, int64_t row_in_sequence)
        : key0(static_cast<uint32_t>(seed)),
          key1(static_cast<uint32_t>(seed >> 32) ^ static_cast<uint32_t>(offset >> 32)),
          head_index(static_cast<uint32_t>(batch * num_heads + head)),
          offset_lo(static_cast<uint32_t>(offset)),
          row(static_cast<uint32_t>(row_in_sequence)) {}

    /* Random words for key columns 4*group .. 4*group+3. */
    FA_HOST_DEVICE PhiloxBits bits_for_column_group(uint32_t group) const {
        return philox4x32_10(PhiloxBits{group, row, head_index, offset_lo}, key0, key1);
    }

    FA_HOST_DEVICE uint32_t bits_for_column(int64_t column) const {
        const PhiloxBits b = bits_for_column_group(static_cast<uint32_t>(column >> 2));
        switch (column & 3) {
            case 0: return b.x;
            case 1: return b.y;
            case 2: return b.z;
            default: return b.w;
        }
    }
};

} // namespace flashattn
#endif /* __cplusplus */

#endif /* FLASHATTN_PHILOX_H */
