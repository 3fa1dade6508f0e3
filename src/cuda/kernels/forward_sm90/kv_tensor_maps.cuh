// The Hopper forward's parameter block, and the TMA descriptors of K and V that it carries.
//
// Where K and V are dense (batch, seqlen_k, heads_k, head_dim) tensors whose strides and base are
// multiples of 16 bytes, one producer thread loads each K/V block with TMA (cp.async.bulk.tensor):
// a box of kSwizzleCols columns by kBlockN rows per column block, written in the same 128-byte (or
// 64-byte) swizzle that wgmma reads, with rows past seqlen_k and columns past head_dim filled with
// zeros by the hardware, as the cp.async path fills them. Everything else (varlen, seqused_k,
// unaligned strides) keeps the per-lane cp.async path, which zero-fills at each sequence's own end.
#pragma once

#include "kernels/fwd_args.h"

#include <cuda.h>
#include <cuda_runtime.h>

namespace flashattn::cuda {

struct Sm90FwdParams {
    FwdArgs args;
    CUtensorMap k_map, v_map; // valid when kv_tma
    bool kv_tma;
};

// cuTensorMapEncodeTiled from the driver (the runtime has no wrapper; the library does not link
// libcuda), looked up once; its signature as of CUDA 12.0.
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

// A (head_dim, rows, heads, batch) map of x with boxes of box_cols x box_rows; false where TMA cannot
// address it (then the kernel takes the cp.async path).
inline bool encode_rows_map(CUtensorMap& map, const fa_tensor& x, bool bf16, int head_dim, int rows, int heads,
                            int batch, int box_cols, int box_rows) {
    constexpr int64_t kElem = 2;
    const TensorMapEncodeTiled encode = tensor_map_encoder();
    if (!encode || reinterpret_cast<uintptr_t>(x.data) % 16 != 0) return false;
    const int64_t batch_stride = batch > 1 ? x.batch_stride : int64_t(rows) * x.row_stride;
    const cuuint64_t dims[4] = {cuuint64_t(head_dim), cuuint64_t(rows), cuuint64_t(heads), cuuint64_t(batch)};
    const int64_t strides[3] = {x.row_stride * kElem, x.head_stride * kElem, batch_stride * kElem};
    cuuint64_t byte_strides[3];
    for (int i = 0; i < 3; ++i) {
        if (strides[i] <= 0 || strides[i] % 16 != 0 || strides[i] >= (int64_t(1) << 40)) return false;
        byte_strides[i] = cuuint64_t(strides[i]);
    }
    const cuuint32_t box[4] = {cuuint32_t(box_cols), cuuint32_t(box_rows), 1, 1};
    const cuuint32_t element_strides[4] = {1, 1, 1, 1};
    const CUtensorMapSwizzle swizzle =
        box_cols * kElem == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
    return encode(&map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 4, x.data, dims,
                  byte_strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                  CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// The parameter block of one launch: TMA for K and V where the layout allows it.
template <typename Traits>
Sm90FwdParams sm90_forward_params(const FwdArgs& args, bool bf16) {
    Sm90FwdParams p{};
    p.args = args;
    const bool dense = args.cu_seqlens_k == nullptr && args.seqused_k == nullptr && args.block_table == nullptr;
    if (dense) {
        const int heads_k = args.num_heads / args.heads_per_kv_head;
        p.kv_tma = encode_rows_map(p.k_map, args.k, bf16, args.head_dim, args.seqlen_k, heads_k, args.batch,
                                   Traits::kSwizzleCols, Traits::kBlockN) &&
                   encode_rows_map(p.v_map, args.v, bf16, args.head_dim, args.seqlen_k, heads_k, args.batch,
                                   Traits::kSwizzleCols, Traits::kBlockN);
    }
    return p;
}

} // namespace flashattn::cuda
