// TMA descriptors (CUtensorMap) of the attention tensors, made on the host for one launch.
//
// A map covers (head_dim, rows, heads, batch) of a dense (batch, rows, heads, head_dim) tensor and
// is read in boxes of box_cols x box_rows written to shared memory in the 128-byte (or 64-byte)
// swizzle that wgmma reads; the hardware fills what lies outside the map with zeros, so a map ends
// where a sequence ends only for dense batches: varlen and seqused_k keep the kernels' cp.async paths.
// The encoder is the driver's cuTensorMapEncodeTiled, looked up through the runtime (the library
// does not link libcuda).
#pragma once

#include <flashattn/flashattn.h>

#include <cuda.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

namespace flashattn::cuda {

// cuTensorMapEncodeTiled's signature as of CUDA 12.0.
using TensorMapEncodeTiled = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                          const cuuint64_t*, const cuuint32_t*, const cuuint32_t*,
                                          CUtensorMapInterleave, CUtensorMapSwizzle, CUtensorMapL2promotion,
                                          CUtensorMapFloatOOBfill);

inline TensorMapEncodeTiled tensor_map_encoder() {
    static const TensorMapEncodeTiled encode = [] {
        void* fn = nullptr;
        cudaDriverEntryPointQueryResult found{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
                cudaSuccess ||
            found != cudaDriverEntryPointSuccess)
            fn = nullptr;
        return reinterpret_cast<TensorMapEncodeTiled>(fn);
    }();
    return encode;
}

// The byte strides of a map's outer dimensions as cuTensorMapEncodeTiled takes them: false where
// one is not positive, not a multiple of 16 or not below 2^40 (TMA's limits).
template <int N>
inline bool tma_byte_strides(const int64_t (&strides)[N], cuuint64_t (&byte_strides)[N]) {
    for (int i = 0; i < N; ++i) {
        if (strides[i] <= 0 || strides[i] % 16 != 0 || strides[i] >= (int64_t(1) << 40)) return false;
        byte_strides[i] = cuuint64_t(strides[i]);
    }
    return true;
}

// The map of x's (head_dim, rows, heads, batch) in 16-bit elements with boxes of box_cols x box_rows
// (box_cols x 2 bytes: 128 or 64, the swizzle's row); false where TMA cannot address x (a base or a
// stride not a multiple of 16 bytes, a zero stride, an empty extent, which the driver would refuse
// with an error that a sanitizer reports): the caller then loads with cp.async.
inline bool encode_rows_map(CUtensorMap& map, const fa_tensor& x, bool bf16, int head_dim, int rows, int heads,
                            int batch, int box_cols, int box_rows) {
    constexpr int64_t kElem = 2;
    if (head_dim <= 0 || rows <= 0 || heads <= 0 || batch <= 0) return false;
    const TensorMapEncodeTiled encode = tensor_map_encoder();
    if (!encode || reinterpret_cast<uintptr_t>(x.data) % 16 != 0) return false;
    const int64_t batch_stride = batch > 1 ? x.batch_stride : int64_t(rows) * x.row_stride;
    const int64_t head_stride = heads > 1 ? x.head_stride : int64_t(head_dim);
    const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
    cuuint64_t byte_strides[3];
    if (!tma_byte_strides({x.row_stride * kElem, head_stride * kElem, batch_stride * kElem}, byte_strides)) return false;
    const cuuint32_t box[4] = {cuuint32_t(box_cols), cuuint32_t(box_rows), 1, 1};
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    const CUtensorMapSwizzle swizzle = box_cols * kElem == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
    return encode(&map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, x.data, dims,
                  byte_strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The map of the backward's fp32 dQ scratch (bwd_args.h: dq_accum [chunk][head][row][tile_dim]) as
// (tile_dim, rows of a sequence, sequences, heads, chunks) for bulk tensor reductions from shared
// memory: boxes of 32 floats (one 128-byte swizzle row) x box_rows rows. Dense batches
// (seqlen_rows > 0: the rows of sequence b are b * seqlen_rows + i) have the sequences as a
// dimension of their own, so the hardware drops a box's rows past seqlen_rows; packed (varlen) rows
// are one sequence of `rows`, and there a box may cross from one sequence's rows into the next, so
// the kernel adds only blocks that end inside their sequence this way (the others with
// red.global, bwd_sm90_common.cuh). chunk_stride 0: one buffer. False where TMA cannot address the
// scratch (a coordinate past int32, a stride past 2^40 bytes).
inline bool encode_dq_accum_map(CUtensorMap& map, float* data, int tile_dim, int64_t rows, int seqlen_rows, int heads,
                                int chunks, int64_t chunk_stride, int box_rows) {
    constexpr int64_t kElem = 4;
    constexpr int kBoxCols = 128 / kElem;
    const TensorMapEncodeTiled encode = tensor_map_encoder();
    if (!encode || reinterpret_cast<uintptr_t>(data) % 16 != 0 || rows <= 0 || rows > INT32_MAX ||
        tile_dim % kBoxCols != 0 || seqlen_rows < 0 || (seqlen_rows > 0 && rows % seqlen_rows != 0))
        return false;
    const int buffers = chunk_stride > 0 ? chunks : 1;
    const int64_t head_stride = rows * tile_dim;
    const int64_t seq_rows = seqlen_rows > 0 ? seqlen_rows : rows;
    const cuuint64_t dims[5] = {cuuint64_t(tile_dim), cuuint64_t(seq_rows), cuuint64_t(rows / seq_rows),
                                cuuint64_t(heads), cuuint64_t(buffers)};
    cuuint64_t byte_strides[4];
    if (!tma_byte_strides({tile_dim * kElem, seq_rows * tile_dim * kElem, head_stride * kElem,
                           (chunk_stride > 0 ? chunk_stride : head_stride * heads) * kElem},
                          byte_strides))
        return false;
    const cuuint32_t box[5] = {cuuint32_t(kBoxCols), cuuint32_t(box_rows), 1, 1, 1};
    const cuuint32_t element_strides[5] = {1, 1, 1, 1, 1};
    return encode(&map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 5, data, dims, byte_strides, box, element_strides,
                  CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

} // namespace flashattn::cuda
