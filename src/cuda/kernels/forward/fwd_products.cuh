// The forward's two tensor-core products, S = Q K^T and O += P V, on one thread (FwdTraits, mma.sync):
// the forward kernel's and the decode kernel's, which differ in how K and V reach shared memory and
// which blocks a thread visits, not in how a block is multiplied.
#pragma once

#include "device/tile_ops.cuh"

#include <cute/tensor.hpp>

namespace flashattn::cuda::kernels {

using namespace cute;

// Q, K and V^T are read from shared memory by ldmatrix (SmemGemm: qk.a, qk.b and pv.b are this
// thread's parts of the tiles; a kernel with a ring of stages passes qk.b and pv.b shifted to a
// block's stage). P never leaves registers: the S accumulator, converted to 16 bits, is the A
// operand of P V.
template <typename Traits, typename SmemQ, typename SmemK, typename SmemVt>
struct FwdProducts {
    using TiledMma = typename Traits::TiledMma;
    SmemGemm<TiledMma, typename Traits::SmemCopyQK, typename Traits::SmemCopyQK, SmemQ, SmemK> qk; // S = Q K^T
    RegsSmemGemm<TiledMma, typename Traits::SmemCopyVt, SmemVt> pv;                                 // O += P V

    // acc_o += P V: P the probabilities in S's accumulator acc_s, V^T read at vt_stage.
    template <typename AccO, typename AccS, typename VtStage>
    __device__ __forceinline__ void add_pv(AccO& acc_o, AccS const& acc_s, VtStage const& vt_stage) const {
        Tensor p = convert_fragment<typename Traits::Element>(acc_s);
        Tensor tOrP = make_tensor(p.data(), accumulator_as_a_operand(p.layout()));
        pv(acc_o, tOrP, vt_stage);
    }
};

template <typename Traits, typename SmemQ, typename SmemK, typename SmemVt>
__device__ __forceinline__ auto fwd_products(int tid, SmemQ const& sQ, SmemK const& sK, SmemVt const& sVt) {
    using TiledMma = typename Traits::TiledMma;
    return FwdProducts<Traits, SmemQ, SmemK, SmemVt>{
        smem_gemm<TiledMma, typename Traits::SmemCopyQK, typename Traits::SmemCopyQK>(tid, sQ, sK),
        regs_smem_gemm<TiledMma, typename Traits::SmemCopyVt>(tid, sVt)};
}

} // namespace flashattn::cuda::kernels
