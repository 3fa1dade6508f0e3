// The CUDA backend's planner (src/cuda/host/planner.h) on described devices: every kernel it can
// choose, why it rejects the others, the grid and split rules, and every piece of scratch memory.
// Pure host code: these run in every build, CI's included, without a GPU. Tensor pointers are
// addresses that are never dereferenced (the planner reads strides and alignment only).
#include "host/planner.h"

#include "core/error.h"
#include "core/overrides.h"
#include "core/problem.h"

#include <flashattn/flashattn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>

namespace flashattn::cuda {
namespace {

DeviceInfo h200() {
    DeviceInfo d;
    d.cc_major = 9, d.cc_minor = 0, d.sm_count = 132;
    d.sm90_kernels = true;
    d.tile_dims = {32, 64, 96, 128, 192, 256};
    d.decode_ctas_per_sm = {2, 2, 2, 2, 2, 2};
    d.inference_ctas_per_sm = {2, 2, 2, 2, 1, 1};
    return d;
}
DeviceInfo a100() {
    DeviceInfo d = h200();
    d.cc_major = 8, d.sm_count = 108;
    return d;
}

// A fake device address, 256-byte aligned unless told otherwise.
void* at(uintptr_t address) { return reinterpret_cast<void*>(address); }

// A dense (batch, seqlen, heads, head_dim) forward problem with contiguous tensors.
struct Dense {
    int batch = 2, seqlen_q = 1024, seqlen_k = 1024, heads = 16, heads_k = 16, head_dim = 128;
    int head_dim_v = 0; // of v and out; 0 = head_dim
    bool causal = false;
    int window_left = -1, window_right = -1;
    float softcap = 0.0f, dropout = 0.0f;
    int num_splits = 1;
    bool attn_probs = false, lse = true;

    fa_fwd_params params() const {
        fa_fwd_params p;
        fa_fwd_params_init(&p);
        p.dtype = FA_BFLOAT16;
        p.batch = batch, p.seqlen_q = seqlen_q, p.seqlen_k = seqlen_k;
        p.num_heads = heads, p.num_heads_k = heads_k, p.head_dim = head_dim;
        p.head_dim_v = head_dim_v;
        const int dv = value_dim();
        const auto view = [&](uintptr_t base, int rows, int h, int d) {
            return fa_tensor{at(base), int64_t(rows) * h * d, int64_t(h) * d, d};
        };
        p.q = view(0x10000000, seqlen_q, heads, head_dim);
        p.k = view(0x20000000, seqlen_k, heads_k, head_dim);
        p.v = view(0x30000000, seqlen_k, heads_k, dv);
        p.out = view(0x40000000, seqlen_q, heads, dv);
        p.softmax_lse = lse ? static_cast<float*>(at(0x50000000)) : nullptr;
        p.causal = causal;
        p.window_left = window_left, p.window_right = window_right;
        p.softcap = softcap;
        p.dropout_p = dropout;
        p.num_splits = num_splits;
        p.attn_probs = attn_probs ? static_cast<float*>(at(0x60000000)) : nullptr;
        p.backend = FA_BACKEND_CUDA;
        return p;
    }
    Problem problem() const {
        const fa_fwd_params p = params();
        return make_problem(&p, false);
    }
    int value_dim() const { return head_dim_v ? head_dim_v : head_dim; }
};

ForwardPlan plan(const Dense& d, const DeviceInfo& device = h200(), const Overrides& o = {}) {
    return plan_forward(d.problem(), device, o);
}

std::string rejection(const Rejections& r, Kernel kernel) {
    for (int i = 0; i < r.count; ++i)
        if (r.items[size_t(i)].kernel == kernel) return r.items[size_t(i)].reason;
    return "";
}

Overrides overrides(const char* spec) { return parse_overrides(spec); }

// ---------------------------------------------------------------------------------------------
// The training forward.

TEST(PlannerForward, HopperRunsTheWgmmaKernelPersistentWithoutAMask) {
    const ForwardPlan p = plan(Dense{});
    EXPECT_EQ(p.kernel, Kernel::forward_sm90);
    EXPECT_EQ(p.tile_dim, 128);
    EXPECT_EQ(p.block_m, 128);
    EXPECT_EQ(p.block_n, 128);
    EXPECT_EQ(p.num_m_blocks, 8);
    EXPECT_TRUE(p.sm90_persistent);
    EXPECT_EQ(p.ctas, 132); // min(8 x 2 x 16 tiles, the SMs)
    EXPECT_EQ(p.section_heads, 0);
    EXPECT_EQ(p.workspace.total, 0u);
    EXPECT_NE(rejection(p.rejected, Kernel::forward_sm80), "");
    EXPECT_EQ(rejection(p.rejected, Kernel::forward_sm90), "");
}

TEST(PlannerForward, ShortD64ProblemsRunTheMmaSyncKernel) {
    Dense d;
    d.head_dim = 64, d.seqlen_q = d.seqlen_k = 512;
    const ForwardPlan p = plan(d);
    EXPECT_EQ(p.kernel, Kernel::forward_sm80);
    EXPECT_EQ(p.block_m, 128);
    EXPECT_EQ(p.block_n, 128);
    EXPECT_EQ(p.ctas, 4 * 2 * 16);
    EXPECT_NE(rejection(p.rejected, Kernel::forward_sm90).find("512 keys"), std::string::npos);
    d.seqlen_k = 513;
    EXPECT_EQ(plan(d).kernel, Kernel::forward_sm90);
}

// Up to d64 the Hopper forward has three consumer warpgroups: 192 query rows a tile.
TEST(PlannerForward, HopperD64TilesHave192Rows) {
    Dense d;
    d.head_dim = 64;
    const ForwardPlan p = plan(d);
    EXPECT_EQ(p.kernel, Kernel::forward_sm90);
    EXPECT_EQ(p.block_m, 192);
    EXPECT_EQ(p.block_n, 128);
    EXPECT_EQ(p.num_m_blocks, 6); // 1024 rows
    EXPECT_EQ(p.ctas, 132);       // min(6 x 2 x 16 tiles, the SMs)
    d.head_dim = 96;
    EXPECT_EQ(plan(d).block_m, 128);
}

// ... masked or not: under a causal or local mask each consumer computes only its rows' key blocks
// (fwd_kernel_sm90.cuh), so the 192-row tile serves short masked problems too.
TEST(PlannerForward, HopperD64TilesHave192RowsMaskedOrNot) {
    Dense d;
    d.head_dim = 64, d.causal = true;
    const ForwardPlan p = plan(d);
    EXPECT_EQ(p.kernel, Kernel::forward_sm90);
    EXPECT_EQ(p.tile_dim, 64);
    EXPECT_EQ(p.block_m, 192);
    EXPECT_EQ(p.block_n, 128);
    EXPECT_EQ(p.num_m_blocks, 6); // 1024 rows
    EXPECT_TRUE(p.sm90_persistent && p.sm90_claims_tiles);
    EXPECT_EQ(p.ctas, 132);         // min(6 x 2 x 16 tiles, the SMs)
    d.batch = 1, d.heads = d.heads_k = 4;
    EXPECT_EQ(plan(d).ctas, 6 * 4); // fewer tiles than SMs: a CTA each
    d.batch = 2, d.heads = d.heads_k = 16;
    d.head_dim = 32; // tile dim 32: the same tile
    EXPECT_EQ(plan(d).tile_dim, 32);
    EXPECT_EQ(plan(d).block_m, 192);
    d.head_dim = 64;
    d.seqlen_q = d.seqlen_k = 2048;
    EXPECT_EQ(plan(d).block_m, 192);
    EXPECT_EQ(plan(d).num_m_blocks, 11);
    d.seqlen_q = d.seqlen_k = 1024;
    d.causal = false, d.window_left = 100, d.window_right = 16; // a local window
    EXPECT_EQ(plan(d).block_m, 192);
    Dense forced; // the mma.sync kernel's range forced onto the Hopper kernel
    forced.head_dim = 64, forced.causal = true, forced.seqlen_q = forced.seqlen_k = 512;
    EXPECT_EQ(plan(forced).kernel, Kernel::forward_sm80);
    EXPECT_EQ(plan(forced, h200(), overrides("forward_kernel=sm90")).block_m, 192);
    EXPECT_EQ(plan(forced, h200(), overrides("forward_kernel=sm90")).num_m_blocks, 3);
    // Above d64 one tile: d96 and d128 at 128 rows, masked or not.
    for (const int head_dim : {96, 128}) {
        Dense wide;
        wide.head_dim = head_dim, wide.causal = true;
        const ForwardPlan w = plan(wide);
        EXPECT_EQ(w.block_m, 128) << head_dim;
        EXPECT_EQ(w.block_n, 128) << head_dim;
        EXPECT_EQ(w.num_m_blocks, 8) << head_dim;
        EXPECT_EQ(w.ctas, 132) << head_dim;
    }
}

TEST(PlannerForward, WithoutHopperOrItsKernelsTheMmaSyncKernel) {
    const ForwardPlan ampere = plan(Dense{}, a100());
    EXPECT_EQ(ampere.kernel, Kernel::forward_sm80);
    EXPECT_EQ(ampere.block_n, 64);
    EXPECT_EQ(ampere.ctas, 8 * 2 * 16);
    EXPECT_NE(rejection(ampere.rejected, Kernel::forward_sm90).find("compute capability 9.0"), std::string::npos);
    DeviceInfo no_sm90 = h200();
    no_sm90.sm90_kernels = false;
    const ForwardPlan p = plan(Dense{}, no_sm90);
    EXPECT_EQ(p.kernel, Kernel::forward_sm80);
    EXPECT_NE(rejection(p.rejected, Kernel::forward_sm90).find("FLASHATTN_CUDA_ARCHS"), std::string::npos);
}

TEST(PlannerForward, OverridesPickAmongTheKernelsThatCanRun) {
    EXPECT_EQ(plan(Dense{}, h200(), overrides("forward_kernel=sm80")).kernel, Kernel::forward_sm80);
    EXPECT_NE(rejection(plan(Dense{}, h200(), overrides("forward_kernel=sm80")).rejected, Kernel::forward_sm90)
                  .find("overrides"),
              std::string::npos);
    Dense short_d64;
    short_d64.head_dim = 64, short_d64.seqlen_k = 256;
    EXPECT_EQ(plan(short_d64, h200(), overrides("forward_kernel=sm90")).kernel, Kernel::forward_sm90);
    EXPECT_EQ(plan(Dense{}, a100(), overrides("forward_kernel=sm90")).kernel, Kernel::forward_sm80);
}

TEST(PlannerForward, MaskedTilesAreClaimedHeavyFirstInSections) {
    Dense d;
    d.causal = true;
    const ForwardPlan p = plan(d);
    EXPECT_EQ(p.kernel, Kernel::forward_sm90);
    EXPECT_TRUE(p.sm90_persistent);
    EXPECT_TRUE(p.sm90_claims_tiles);
    EXPECT_EQ(p.ctas, 132);
    EXPECT_EQ(p.workspace.size(Piece::tile_counter), sizeof(unsigned)); // zeroed before the launch
    EXPECT_EQ(p.workspace.total, 256u);
    EXPECT_FALSE(plan(Dense{}).sm90_claims_tiles); // equal tiles: a grid stride
    Dense ragged; // unequal tiles without a mask: the last of a pair ends past the sequence
    ragged.head_dim = 64; // 192-row tiles: 1024 rows end 128 rows into the sixth
    EXPECT_TRUE(plan(ragged).sm90_claims_tiles);
    EXPECT_EQ(plan(ragged).workspace.size(Piece::tile_counter), sizeof(unsigned));
    ragged.head_dim = 128, ragged.seqlen_q = ragged.seqlen_k = 1000;
    EXPECT_TRUE(plan(ragged).sm90_claims_tiles);
    // 16 MB sections of K/V: 2 x 1024 keys x 128 x 2 bytes = 512 KB a pair -> 32 pairs, all of them.
    EXPECT_EQ(p.section_heads, 32);
    d.seqlen_k = d.seqlen_q = 32768, d.batch = 1;
    EXPECT_EQ(plan(d).section_heads, 1); // 16 MB of K/V a pair
    d.softcap = 30.0f;
    const ForwardPlan extras = plan(d);
    EXPECT_TRUE(extras.sm90_claims_tiles);
    EXPECT_TRUE(extras.sm90_persistent);
    Dense d256;
    d256.head_dim = 256, d256.causal = true;
    const ForwardPlan wide = plan(d256);
    EXPECT_FALSE(wide.sm90_persistent); // no looping form above d128: one CTA per tile
    EXPECT_FALSE(wide.sm90_claims_tiles);
    EXPECT_EQ(wide.workspace.total, 0u);
    EXPECT_EQ(wide.block_n, 64);
    EXPECT_EQ(wide.ctas, 8 * 2 * 16);
    EXPECT_EQ(wide.section_heads, 16); // 1 MB of K/V a pair: the 16 MB section, under the cap too
    // GQA 32/4 at d256, 16 x 1k: 128 KB of K/V a query head (the group shares it) would make 128-pair
    // sections; where each tile is its own CTA a section holds at most 16 pairs.
    Dense gqa256 = d256;
    gqa256.batch = 16, gqa256.heads = 32, gqa256.heads_k = 4;
    EXPECT_EQ(plan(gqa256).section_heads, 16);
    gqa256.seqlen_q = gqa256.seqlen_k = 8192, gqa256.batch = 2;
    EXPECT_EQ(plan(gqa256).section_heads, 16); // 1 MB a query head: the 16 MB section itself
    gqa256.seqlen_q = gqa256.seqlen_k = 16384, gqa256.batch = 1;
    EXPECT_EQ(plan(gqa256).section_heads, 8);
    Dense gqa128 = gqa256; // persistent at d128: the 16 MB section, no cap (1k: 128 pairs)
    gqa128.head_dim = 128, gqa128.heads_k = 8, gqa128.batch = 16, gqa128.seqlen_q = gqa128.seqlen_k = 1024;
    EXPECT_TRUE(plan(gqa128).sm90_persistent);
    EXPECT_EQ(plan(gqa128).section_heads, 128);
}

TEST(PlannerForward, UnsupportedDevicesAndBuildsSayWhy) {
    DeviceInfo turing = a100();
    turing.cc_major = 7, turing.cc_minor = 5;
    try {
        plan(Dense{}, turing);
        FAIL() << "compute capability 7.5 must be refused";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), FA_ERROR_UNSUPPORTED);
        EXPECT_NE(std::string(e.what()).find("8.0 or newer"), std::string::npos) << e.what();
    }
    DeviceInfo only_d128 = h200();
    only_d128.tile_dims = {128};
    Dense d256;
    d256.head_dim = 256;
    try {
        plan(d256, only_d128);
        FAIL() << "a head dim the build lacks must be refused";
    } catch (const Error& e) {
        EXPECT_EQ(e.status(), FA_ERROR_UNSUPPORTED);
        EXPECT_NE(std::string(e.what()).find("FLASHATTN_HEADDIMS=128"), std::string::npos) << e.what();
    }
    Dense d40;
    d40.head_dim = 40;
    EXPECT_EQ(plan(d40, only_d128).tile_dim, 128); // the smallest compiled tile that holds it
}

TEST(PlannerForward, EmptyProblemsPlanNothing) {
    Dense d;
    d.seqlen_q = 0;
    const ForwardPlan p = plan(d);
    EXPECT_TRUE(p.empty);
    EXPECT_EQ(p.workspace.total, 0u);
}

// ---------------------------------------------------------------------------------------------
// Staging and the forward's scratch pieces.

TEST(PlannerForward, OddLayoutsAreStagedIntoWorkspacePieces) {
    Dense d;
    d.head_dim = 36; // not a multiple of 8: every tensor is staged, padded to 40
    const ForwardPlan p = plan(d);
    EXPECT_TRUE(p.staging.pad_head_dim);
    EXPECT_EQ(p.staging.padded_dim, 40);
    EXPECT_EQ(p.head_dim, 40);
    EXPECT_EQ(p.tile_dim, 64);
    EXPECT_TRUE(p.staging.q && p.staging.k && p.staging.v && p.staging.out);
    const size_t q_bytes = size_t(2) * 1024 * 16 * 40 * 2;
    EXPECT_EQ(p.workspace.size(Piece::q), q_bytes);
    EXPECT_EQ(p.workspace.size(Piece::k), q_bytes);
    EXPECT_EQ(p.workspace.size(Piece::v), q_bytes);
    EXPECT_EQ(p.workspace.size(Piece::out), q_bytes);
    EXPECT_EQ(p.workspace.size(Piece::lse), 0u);
    size_t expected_total = 0;
    for (size_t i = 0; i < size_t(Piece::count); ++i) {
        EXPECT_EQ(p.workspace.offset[i] % 256, 0u);
        expected_total += WorkspaceLayout::rounded(p.workspace.bytes[i]);
    }
    EXPECT_EQ(p.workspace.total, expected_total);

    // A misaligned view stages only that tensor; attn_probs without an lse gets one.
    Dense aligned;
    aligned.attn_probs = true, aligned.lse = false;
    fa_fwd_params params = aligned.params();
    params.k.data = at(0x20000008);
    const ForwardPlan one = plan_forward(make_problem(&params, false), h200(), {});
    EXPECT_FALSE(one.staging.q);
    EXPECT_TRUE(one.staging.k);
    EXPECT_FALSE(one.staging.v);
    EXPECT_EQ(one.workspace.size(Piece::k), size_t(2) * 1024 * 16 * 128 * 2);
    EXPECT_EQ(one.workspace.size(Piece::lse), size_t(16) * 2 * 1024 * 4);
}

// A value head dim unlike the query's runs on the kernels of the wider one: the narrower side is
// staged, zero-padded to it, and out comes back through a staged copy when v is the narrower. (On
// Hopper's wgmma forward, 192 / 128 has a kernel of its own: the next test.)
TEST(PlannerForward, ValueHeadDimsRunAtTheWiderWidthStaged) {
    Dense mla;
    mla.head_dim = 192, mla.head_dim_v = 128; // DeepSeek's prefill, on the mma.sync kernel
    const ForwardPlan p = plan(mla, a100());
    EXPECT_EQ(p.kernel, Kernel::forward_sm80);
    EXPECT_TRUE(p.staging.pad_head_dim);
    EXPECT_EQ(p.staging.padded_dim, 192);
    EXPECT_EQ(p.staging.padded_dim_v, 192);
    EXPECT_EQ(p.staging.qk_dim, 192);
    EXPECT_EQ(p.staging.v_dim, 128);
    EXPECT_EQ(p.head_dim, 192);
    EXPECT_EQ(p.head_dim_v, 192);
    EXPECT_EQ(p.tile_dim, 192);
    EXPECT_EQ(p.tile_dim_v, 192);
    EXPECT_FALSE(p.staging.q || p.staging.k);
    EXPECT_TRUE(p.staging.v && p.staging.out);
    const size_t rows192 = size_t(2) * 1024 * 16 * 192 * 2;
    EXPECT_EQ(p.workspace.size(Piece::q), 0u);
    EXPECT_EQ(p.workspace.size(Piece::k), 0u);
    EXPECT_EQ(p.workspace.size(Piece::v), rows192);
    EXPECT_EQ(p.workspace.size(Piece::out), rows192);

    Dense narrow_v;
    narrow_v.head_dim = 128, narrow_v.head_dim_v = 64;
    const ForwardPlan n = plan(narrow_v);
    EXPECT_EQ(n.kernel, Kernel::forward_sm90);
    EXPECT_EQ(n.head_dim, 128);
    EXPECT_EQ(n.head_dim_v, 128);
    EXPECT_EQ(n.tile_dim, 128);
    EXPECT_EQ(n.tile_dim_v, 128);
    EXPECT_TRUE(!n.staging.q && !n.staging.k && n.staging.v && n.staging.out);
    EXPECT_EQ(n.workspace.size(Piece::v), size_t(2) * 1024 * 16 * 128 * 2);

    Dense wide_v;
    wide_v.head_dim = 64, wide_v.head_dim_v = 128;
    const ForwardPlan w = plan(wide_v);
    EXPECT_EQ(w.head_dim, 128);
    EXPECT_EQ(w.tile_dim, 128);
    EXPECT_TRUE(w.staging.q && w.staging.k && !w.staging.v && !w.staging.out);
    EXPECT_EQ(w.workspace.size(Piece::q), size_t(2) * 1024 * 16 * 128 * 2);
    EXPECT_EQ(w.workspace.size(Piece::out), 0u);

    Dense odd;
    odd.head_dim = 59, odd.head_dim_v = 40; // both staged, at 64
    const ForwardPlan o = plan(odd);
    EXPECT_EQ(o.head_dim, 64);
    EXPECT_EQ(o.tile_dim, 64);
    EXPECT_TRUE(o.staging.q && o.staging.k && o.staging.v && o.staging.out);

    Dense same;
    same.head_dim_v = 128; // equal widths: nothing staged
    const ForwardPlan e = plan(same);
    EXPECT_FALSE(e.staging.pad_head_dim);
    EXPECT_EQ(e.workspace.total, 0u);

    // Split-KV's partials are rows of the kernels' width (the inference kernels: staged on Hopper too).
    Dense split = mla;
    split.seqlen_q = 64, split.seqlen_k = 8192, split.batch = 1, split.num_splits = 4;
    const ForwardPlan s = plan(split);
    EXPECT_EQ(s.kernel, Kernel::inference);
    EXPECT_EQ(s.splits, 4);
    EXPECT_EQ(s.tile_dim_v, 192);
    EXPECT_TRUE(s.staging.v && s.staging.out);
    EXPECT_EQ(s.workspace.size(Piece::partial_out), size_t(4) * 64 * 16 * 192 * 4);
}

// DeepSeek's 192 / 128 on Hopper's wgmma forward: its own instance (tiles::forward_sm90_value_dim)
// with V and O 128 wide, so nothing is staged for the widths, 128-key blocks (Q, two K and two V
// stages fit: 208 KB), persistent; layouts the kernel cannot address are staged at their own width.
TEST(PlannerForward, HopperRunsTheValueDimInstanceAt192And128) {
    Dense mla;
    mla.head_dim = 192, mla.head_dim_v = 128;
    const ForwardPlan p = plan(mla);
    EXPECT_EQ(p.kernel, Kernel::forward_sm90);
    EXPECT_EQ(p.tile_dim, 192);
    EXPECT_EQ(p.tile_dim_v, 128);
    EXPECT_EQ(p.head_dim, 192);
    EXPECT_EQ(p.head_dim_v, 128);
    EXPECT_FALSE(p.staging.pad_head_dim);
    EXPECT_EQ(p.staging.padded_dim, 192);
    EXPECT_EQ(p.staging.padded_dim_v, 128);
    EXPECT_FALSE(p.staging.q || p.staging.k || p.staging.v || p.staging.out);
    EXPECT_EQ(p.workspace.total, 0u);
    EXPECT_EQ(p.block_m, 128);
    EXPECT_EQ(p.block_n, 128);
    EXPECT_EQ(p.num_m_blocks, 8);
    EXPECT_TRUE(p.sm90_persistent);
    EXPECT_FALSE(p.sm90_claims_tiles);
    EXPECT_EQ(p.ctas, 132);

    // Causal: tiles claimed from the counter; sections of 16 MB of K/V at 1024 x (192 + 128) x 2
    // bytes a pair: 25 pairs.
    Dense causal = mla;
    causal.causal = true;
    const ForwardPlan c = plan(causal);
    EXPECT_EQ(c.tile_dim_v, 128);
    EXPECT_TRUE(c.sm90_persistent && c.sm90_claims_tiles);
    EXPECT_EQ(c.workspace.size(Piece::tile_counter), sizeof(unsigned));
    EXPECT_EQ(c.section_heads, 25);

    // GQA, the extras (softcap) and a learnable sink take it too.
    Dense gqa = causal;
    gqa.heads_k = 2, gqa.softcap = 30.0f;
    EXPECT_EQ(plan(gqa).tile_dim_v, 128);
    fa_fwd_params sink = mla.params();
    sink.learnable_sink = static_cast<const float*>(at(0x70000000));
    EXPECT_EQ(plan_forward(make_problem(&sink, false), h200(), {}).tile_dim_v, 128);

    // Varlen: the kernel's cp.async path (no TMA), same instance.
    fa_fwd_params varlen = mla.params();
    varlen.cu_seqlens_q = static_cast<const int32_t*>(at(0x71000000));
    varlen.cu_seqlens_k = static_cast<const int32_t*>(at(0x72000000));
    varlen.total_q = varlen.total_k = int64_t(mla.batch) * mla.seqlen_q;
    const ForwardPlan v = plan_forward(make_problem(&varlen, true), h200(), {});
    EXPECT_EQ(v.kernel, Kernel::forward_sm90);
    EXPECT_EQ(v.tile_dim_v, 128);
    EXPECT_TRUE(v.sm90_claims_tiles); // sequences of any length: tiles claimed from the counter
    EXPECT_EQ(v.workspace.size(Piece::tile_counter), sizeof(unsigned));

    // A v or out the kernel cannot address in 16-byte chunks: staged at 128 columns, not 192.
    fa_fwd_params odd = mla.params();
    odd.v.data = at(0x30000008);
    odd.out.data = at(0x40000008);
    const ForwardPlan o = plan_forward(make_problem(&odd, false), h200(), {});
    EXPECT_EQ(o.tile_dim_v, 128);
    EXPECT_TRUE(o.staging.v && o.staging.out && !o.staging.q && !o.staging.k);
    EXPECT_FALSE(o.staging.pad_head_dim);
    const size_t rows128 = size_t(2) * 1024 * 16 * 128 * 2;
    EXPECT_EQ(o.workspace.size(Piece::v), rows128);
    EXPECT_EQ(o.workspace.size(Piece::out), rows128);

    // Every other kernel and every other pair of widths keeps the staging at the wider width.
    const ForwardPlan forced = plan(mla, h200(), overrides("forward_kernel=sm80"));
    EXPECT_EQ(forced.kernel, Kernel::forward_sm80);
    EXPECT_EQ(forced.tile_dim_v, 192);
    EXPECT_TRUE(forced.staging.v && forced.staging.out);
    for (const auto& [d, dv] : std::initializer_list<std::pair<int, int>>{
             {192, 64}, {176, 128}, {192, 120}, {256, 128}, {128, 192}, {192, 192}}) {
        Dense other;
        other.head_dim = d, other.head_dim_v = dv;
        const ForwardPlan x = plan(other);
        EXPECT_EQ(x.kernel, Kernel::forward_sm90) << d << "/" << dv;
        EXPECT_EQ(x.tile_dim_v, x.tile_dim) << d << "/" << dv;
        EXPECT_EQ(x.head_dim_v, x.head_dim) << d << "/" << dv;
        EXPECT_EQ(x.staging.pad_head_dim, d != dv) << d << "/" << dv;
    }
    Dense d192;
    d192.head_dim = 192; // equal widths: d192's own tile (64-key blocks, one CTA per tile)
    EXPECT_EQ(plan(d192).block_n, 64);
    EXPECT_FALSE(plan(d192).sm90_persistent);
    DeviceInfo no_192 = h200();
    no_192.tile_dims = {128, 256}; // no d192 kernels, so no 192 / 128 one: tile 256, staged
    const ForwardPlan wide = plan(mla, no_192);
    EXPECT_EQ(wide.tile_dim, 256);
    EXPECT_EQ(wide.tile_dim_v, 256);
    EXPECT_EQ(wide.head_dim_v, 192);
    EXPECT_TRUE(wide.staging.v && wide.staging.out);
}

// ---------------------------------------------------------------------------------------------
// The inference kernels: decode tiles, KV caches, paged K/V, split-KV.

struct KvCache {
    int batch = 1, seqlen_q = 1, capacity = 8192, heads = 32, heads_k = 8, head_dim = 128, seqlen_new = 0;
    int head_dim_v = 0; // of the v cache, v_new and out; 0 = head_dim
    int page_size = 0; // > 0: paged
    bool leftpad = false, rotary = false, causal = false;
    int num_splits = 0;
    int32_t lengths[64] = {};
    int32_t table[64] = {};

    KvCacheProblem problem() {
        fa_kvcache_params kv;
        fa_kvcache_params_init(&kv);
        fa_fwd_params& p = kv.fwd;
        p.dtype = FA_BFLOAT16;
        p.batch = batch, p.seqlen_q = seqlen_q, p.seqlen_k = capacity;
        p.num_heads = heads, p.num_heads_k = heads_k, p.head_dim = head_dim;
        p.head_dim_v = head_dim_v;
        const int dv = head_dim_v ? head_dim_v : head_dim;
        p.q = fa_tensor{at(0x10000000), int64_t(seqlen_q) * heads * head_dim, int64_t(heads) * head_dim, head_dim};
        p.out = fa_tensor{at(0x40000000), int64_t(seqlen_q) * heads * dv, int64_t(heads) * dv, dv};
        const int64_t rows = page_size ? page_size : capacity;
        p.k = fa_tensor{at(0x20000000), rows * heads_k * head_dim, int64_t(heads_k) * head_dim, head_dim};
        p.v = fa_tensor{at(0x30000000), rows * heads_k * dv, int64_t(heads_k) * dv, dv};
        p.softmax_lse = static_cast<float*>(at(0x50000000));
        p.causal = causal;
        p.num_splits = num_splits;
        p.backend = FA_BACKEND_CUDA;
        if (page_size) {
            p.block_table = table;
            p.max_blocks_per_seq = capacity / page_size;
            p.block_table_batch_stride = p.max_blocks_per_seq;
            p.page_size = page_size;
            p.num_blocks = batch * p.max_blocks_per_seq;
        }
        kv.batch_cache = batch;
        kv.cache_seqlens = lengths;
        kv.cache_leftpad = leftpad ? lengths : nullptr;
        if (seqlen_new) {
            kv.k_new = fa_tensor{at(0x70000000), int64_t(seqlen_new) * heads_k * head_dim, int64_t(heads_k) * head_dim,
                                 head_dim};
            kv.v_new = fa_tensor{at(0x78000000), int64_t(seqlen_new) * heads_k * dv, int64_t(heads_k) * dv, dv};
            kv.seqlen_new = seqlen_new;
        }
        if (rotary) {
            kv.rotary_cos = at(0x80000000);
            kv.rotary_sin = at(0x88000000);
            kv.rotary_dim = head_dim;
            kv.seqlen_rotary = capacity + seqlen_q;
        }
        return make_kvcache_problem(&kv);
    }
};

ForwardPlan plan(KvCache c, const DeviceInfo& device = h200(), const Overrides& o = {}) {
    return plan_kvcache(c.problem(), device, o);
}

TEST(PlannerInference, BatchOneDecodeSplitsTheKeysToFillOneWave) {
    const ForwardPlan p = plan(KvCache{});
    EXPECT_EQ(p.kernel, Kernel::decode);
    EXPECT_TRUE(p.pack_gqa); // 4 query heads per KV head in one tile
    EXPECT_EQ(p.block_m, 16);
    EXPECT_EQ(p.block_n, 16);
    // 8 items, 264 CTA slots: 33 splits fill the wave, 32 give every split its own share of 512 blocks.
    EXPECT_EQ(p.splits, 32);
    EXPECT_EQ(p.ctas, 8 * 32);
    EXPECT_EQ(p.decode_loads, DecodeLoads::whole_contiguous);
    EXPECT_TRUE(p.dependent_combine);
    EXPECT_EQ(p.workspace.size(Piece::partial_out), size_t(32) * 32 * 128 * 4);
    EXPECT_EQ(p.workspace.size(Piece::partial_lse), size_t(32) * 32 * 4);
    EXPECT_NE(rejection(p.rejected, Kernel::inference), "");
    EXPECT_NE(rejection(p.rejected, Kernel::forward_sm90), "");
    EXPECT_FALSE(plan(KvCache{}, a100()).dependent_combine); // programmatic launch needs sm_90
}

TEST(PlannerInference, ContiguousCachesThatFillTheSmsRunUnsplitPagedOnesInTwo) {
    KvCache contiguous;
    contiguous.batch = 16; // 128 items: 0.97 x the SMs
    const ForwardPlan p = plan(contiguous);
    EXPECT_EQ(p.splits, 1);
    EXPECT_EQ(p.ctas, 128);
    EXPECT_EQ(p.workspace.total, 0u);
    KvCache paged = contiguous;
    paged.page_size = 16;
    const ForwardPlan q = plan(paged);
    EXPECT_EQ(q.splits, 2);
    EXPECT_EQ(q.decode_loads, DecodeLoads::whole_paged);
    EXPECT_FALSE(q.prefetch_pages); // 256 CTAs: more than one a SM
    paged.capacity = 1024; // 1k x 16: unsplit, 128 CTAs, each warp starts its first pages early
    const ForwardPlan short_paged = plan(paged);
    EXPECT_EQ(short_paged.splits, 1);
    EXPECT_TRUE(short_paged.prefetch_pages);
    KvCache short_cache = contiguous;
    short_cache.batch = 4, short_cache.capacity = 1024; // 32 items on a short cache: split by the SMs
    EXPECT_GT(plan(short_cache).splits, 1);
}

TEST(PlannerInference, DecodeCopyKinds) {
    KvCache c;
    c.page_size = 48, c.capacity = 48 * 200; // pages of 3 blocks of 16: whole blocks
    EXPECT_EQ(plan(c).decode_loads, DecodeLoads::whole_paged);
    c.leftpad = true; // a sequence may start inside a block
    EXPECT_EQ(plan(c).decode_loads, DecodeLoads::predicated);
    KvCache d80;
    d80.head_dim = 80; // runs on the d96 tile: partial blocks
    EXPECT_EQ(plan(d80).decode_loads, DecodeLoads::predicated);
    KvCache d256;
    d256.head_dim = 256;
    EXPECT_EQ(plan(d256).decode_loads, DecodeLoads::predicated);
}

TEST(PlannerInference, TallTilesRunTheInferenceVariantUnderFlashAttentionTwosSplitRule) {
    KvCache c;
    c.seqlen_q = 64, c.heads = 8, c.heads_k = 8, c.causal = true;
    const ForwardPlan p = plan(c);
    EXPECT_EQ(p.kernel, Kernel::inference);
    EXPECT_FALSE(p.pack_gqa);
    EXPECT_EQ(p.block_m, 64);
    EXPECT_EQ(p.block_n, 64);
    EXPECT_GT(p.splits, 1);
    EXPECT_EQ(p.ctas, int64_t(8) * p.splits);
    EXPECT_FALSE(p.dependent_combine);
    EXPECT_NE(rejection(p.rejected, Kernel::decode).find("taller"), std::string::npos);
}

TEST(PlannerInference, OverridesChooseTheInferenceKernel) {
    const ForwardPlan tile64 = plan(KvCache{}, h200(), overrides("inference_kernel=tile64"));
    EXPECT_EQ(tile64.kernel, Kernel::inference);
    EXPECT_EQ(tile64.block_m, 64);
    KvCache tall;
    tall.seqlen_q = 64;
    EXPECT_EQ(plan(tall, h200(), overrides("inference_kernel=split_keys")).kernel, Kernel::decode);
    // A forced kernel keeps its splits: the unsplit rule is the automatic choice's.
    KvCache sixteen;
    sixteen.batch = 16;
    EXPECT_EQ(plan(sixteen, h200(), overrides("inference_kernel=split_keys")).splits, 2);
}

TEST(PlannerInference, ExplicitSplitsAreClampedToTheBlocks) {
    KvCache c;
    c.num_splits = 5;
    EXPECT_EQ(plan(c).splits, 5);
    c.num_splits = 1000;
    EXPECT_EQ(plan(c).splits, 128);
    c.capacity = 64, c.num_splits = 16; // 4 blocks of 16 keys
    EXPECT_EQ(plan(c).splits, 4);
    c.num_splits = 1;
    const ForwardPlan one = plan(c);
    EXPECT_EQ(one.splits, 1);
    EXPECT_EQ(one.kernel, Kernel::decode); // a KV cache: still the inference kernels
}

// A KV cache or a paged pool whose v is narrower than k is read through a staged copy of the whole
// v cache (pool), zero-padded to the kernels' width: correct, and a copy of the cache per call.
TEST(PlannerInference, NarrowValueCachesAreStagedWhole) {
    KvCache c;
    c.head_dim = 192, c.head_dim_v = 128, c.batch = 4;
    const ForwardPlan p = plan(c);
    EXPECT_EQ(p.kernel, Kernel::decode);
    EXPECT_EQ(p.head_dim, 192);
    EXPECT_TRUE(!p.staging.q && !p.staging.k && p.staging.v && p.staging.out);
    EXPECT_EQ(p.workspace.size(Piece::v), size_t(4) * 8192 * 8 * 192 * 2);
    EXPECT_EQ(p.workspace.size(Piece::out), size_t(4) * 1 * 32 * 192 * 2);
    KvCache paged;
    paged.head_dim_v = 64, paged.page_size = 256, paged.batch = 2;
    const ForwardPlan g = plan(paged);
    EXPECT_TRUE(g.staging.v && !g.staging.k);
    EXPECT_EQ(g.workspace.size(Piece::v), size_t(2 * 8192 / 256) * 256 * 8 * 128 * 2); // the pool's blocks
    if (g.splits > 1) EXPECT_EQ(g.workspace.size(Piece::partial_out), size_t(g.splits) * 2 * 32 * 128 * 4);
}

TEST(PlannerInference, RotaryQueriesComeFirstInTheWorkspace) {
    KvCache c;
    c.rotary = true, c.seqlen_new = 1;
    const ForwardPlan p = plan(c);
    EXPECT_EQ(p.workspace.at(Piece::rotated_q), 0u);
    EXPECT_EQ(p.workspace.size(Piece::rotated_q), size_t(32) * 128 * 2);
    EXPECT_EQ(p.workspace.at(Piece::partial_out) % 256, 0u);
    EXPECT_GE(p.workspace.at(Piece::partial_out), WorkspaceLayout::rounded(size_t(32) * 128 * 2));
}

TEST(PlannerInference, PlainForwardsSplitOnlyWhenAsked) {
    Dense decode;
    decode.batch = 1, decode.seqlen_q = 1, decode.seqlen_k = 32768, decode.heads = 32, decode.heads_k = 8;
    decode.num_splits = 0; // the heuristic: one query row against a long cache splits
    const ForwardPlan split = plan(decode);
    EXPECT_EQ(split.kernel, Kernel::decode);
    EXPECT_GT(split.splits, 1);
    decode.num_splits = 1;
    EXPECT_EQ(plan(decode).kernel, Kernel::forward_sm90);
    decode.num_splits = 0, decode.dropout = 0.1f; // the heuristic keeps dropout unsplit, as flash_attn
    EXPECT_EQ(plan(decode).kernel, Kernel::forward_sm90);
    Dense training;
    training.num_splits = 0; // 256 tiles fill the GPU: one split, the training kernels
    const ForwardPlan t = plan(training);
    EXPECT_EQ(t.kernel, Kernel::forward_sm90);
    EXPECT_NE(rejection(t.rejected, Kernel::inference).find("one split"), std::string::npos);
    Dense probs = decode;
    probs.dropout = 0.0f, probs.attn_probs = true; // attn_probs never splits
    EXPECT_EQ(plan(probs).kernel, Kernel::forward_sm90);
}

// ---------------------------------------------------------------------------------------------
// The backward.

struct Backward {
    Dense fwd;
    bool deterministic = false;
    bool sink = false; // learnable sinks, and dsink asked for
    BwdProblem problem() const {
        fa_bwd_params b;
        fa_bwd_params_init(&b);
        b.fwd = fwd.params();
        const int64_t rows = fwd.seqlen_q, h = fwd.heads, d = fwd.head_dim, dv = fwd.value_dim();
        b.dout = fa_tensor{at(0x90000000), rows * h * dv, h * dv, dv};
        b.dq = fa_tensor{at(0xa0000000), rows * h * d, h * d, d};
        const int64_t krows = fwd.seqlen_k, hk = fwd.heads_k;
        b.dk = fa_tensor{at(0xb0000000), krows * hk * d, hk * d, d};
        b.dv = fa_tensor{at(0xc0000000), krows * hk * dv, hk * dv, dv};
        b.deterministic = deterministic;
        if (sink) {
            b.fwd.learnable_sink = static_cast<const float*>(at(0xd0000000));
            b.dsink = static_cast<float*>(at(0xd0001000));
        }
        return make_bwd_problem(&b, false);
    }
};

BackwardPlan plan(const Backward& b, const DeviceInfo& device = h200(), const Overrides& o = {}) {
    return plan_backward(b.problem(), device, o);
}

TEST(PlannerBackward, HopperRunsTheWgmmaKernelWhereItMeasuredFaster) {
    const BackwardPlan p = plan(Backward{});
    EXPECT_EQ(p.kernel, Kernel::backward_sm90);
    EXPECT_EQ(p.block_n, 128);
    EXPECT_EQ(p.num_n_blocks, 8);
    EXPECT_EQ(p.num_chunks, 8); // one CTA per key block
    EXPECT_EQ(p.ctas, 8 * 2 * 16);
    EXPECT_FALSE(p.dkv_scratch);
    EXPECT_EQ(p.dq_chunk_stride, 0);
    // The lse in log2 units for the Hopper kernel (bwd_args.h): a value per (head, query row), and
    // the +inf that rows past their sequence load.
    EXPECT_EQ(p.workspace.size(Piece::lse_log2), (size_t(16) * 2 * 1024 + 1) * 4);
    Backward short_d128;
    short_d128.fwd.seqlen_q = 256;
    const BackwardPlan s = plan(short_d128);
    EXPECT_EQ(s.kernel, Kernel::backward_sm80);
    EXPECT_EQ(s.workspace.size(Piece::lse_log2), 0u); // the mma.sync kernel converts the lse itself
    EXPECT_NE(rejection(s.rejected, Kernel::backward_sm90).find("512"), std::string::npos);
    EXPECT_EQ(plan(short_d128, h200(), overrides("backward_kernel=sm90")).kernel, Kernel::backward_sm90);
    Backward d96;
    d96.fwd.head_dim = 96;
    EXPECT_EQ(plan(d96).kernel, Kernel::backward_sm80);
    EXPECT_EQ(plan(d96, h200(), overrides("backward_kernel=sm90")).kernel, Kernel::backward_sm80);
    Backward dropout;
    dropout.fwd.dropout = 0.1f;
    const BackwardPlan dp = plan(dropout, h200(), overrides("backward_kernel=sm90"));
    EXPECT_EQ(dp.kernel, Kernel::backward_sm80);
    EXPECT_NE(rejection(dp.rejected, Kernel::backward_sm90).find("dropout"), std::string::npos);
    EXPECT_EQ(plan(Backward{}, a100()).kernel, Kernel::backward_sm80);
    EXPECT_EQ(plan(Backward{}, h200(), overrides("backward_kernel=sm80")).kernel, Kernel::backward_sm80);
}

// Deterministic mode's ordered dQ on the Hopper kernel (d128, d256, no softcap/ALiBi): one CTA per key
// block, one dQ buffer, added in a fixed key-block order under a counter per (sequence, head, query
// block). Asked for by the override here; where it is automatic: the next test.
TEST(PlannerBackward, DeterministicHopperOrdersTheDqAdditions) {
    const auto plan_ordered = [](const Backward& x) { return plan(x, h200(), overrides("deterministic_dq=ordered")); };
    Backward b;
    b.deterministic = true;
    const BackwardPlan p = plan_ordered(b);
    EXPECT_EQ(p.kernel, Kernel::backward_sm90);
    EXPECT_TRUE(p.ordered_dq);
    EXPECT_EQ(p.num_chunks, 8); // one CTA per key block, as outside deterministic mode
    EXPECT_EQ(p.ctas, 8 * 2 * 16);
    EXPECT_EQ(p.dq_chunk_stride, 0);
    EXPECT_EQ(p.workspace.size(Piece::dq_accum), size_t(16) * 2 * 1024 * 128 * 4); // one buffer
    EXPECT_EQ(p.dq_semaphore_rows, 80);                                         // d128's block height
    EXPECT_EQ(p.dq_semaphore_blocks, 13);                                       // 1024 / 80 query rows
    EXPECT_EQ(p.workspace.size(Piece::dq_semaphore), size_t(2) * 16 * 13 * 4);
    EXPECT_EQ(p.workspace.at(Piece::dq_semaphore) % 256, 0u);
    EXPECT_FALSE(p.dq_keys_descending); // no right window edge: from the first key block up
    // Q, dO and dQ of a 1024-row head take 1 MB: 24 pairs to a 24 MB section.
    EXPECT_EQ(p.dq_section_pairs, 24);
    EXPECT_EQ(plan_ordered(Backward{}).workspace.size(Piece::dq_semaphore), 0u); // not deterministic: none

    Backward causal = b;
    causal.fwd.causal = true;
    EXPECT_TRUE(plan_ordered(causal).dq_keys_descending); // a right edge: from the last key block down
    EXPECT_EQ(plan_ordered(causal).dq_section_pairs, 1);   // and one pair a section
    Backward local = b;
    local.fwd.window_left = 100, local.fwd.window_right = 50;
    EXPECT_TRUE(plan_ordered(local).dq_keys_descending);
    EXPECT_EQ(plan_ordered(local).dq_section_pairs, 1);
    local.fwd.window_right = -1; // a left edge only: every key block meets the blocks from the first
    EXPECT_FALSE(plan_ordered(local).dq_keys_descending);
    EXPECT_EQ(plan_ordered(local).dq_section_pairs, 24);
    Backward long_rows = b; // 16 MB per pair: 1 a section
    long_rows.fwd.batch = 1, long_rows.fwd.heads = long_rows.fwd.heads_k = 32;
    long_rows.fwd.seqlen_q = long_rows.fwd.seqlen_k = 16384;
    const BackwardPlan l = plan_ordered(long_rows);
    EXPECT_EQ(l.dq_section_pairs, 1);
    EXPECT_EQ(l.dq_semaphore_blocks, 205); // 16384 / 80, the last block ragged
    Backward d256 = b; // the d256 schedule too (key blocks of 80: 13 CTAs per pair, the last ragged)
    d256.fwd.head_dim = 256;
    const BackwardPlan p256 = plan_ordered(d256);
    EXPECT_EQ(p256.kernel, Kernel::backward_sm90);
    EXPECT_TRUE(p256.ordered_dq);
    EXPECT_EQ(p256.num_chunks, 13);
    EXPECT_EQ(p256.dq_chunk_stride, 0);
    EXPECT_EQ(p256.dq_semaphore_rows, 64);
    EXPECT_EQ(p256.dq_semaphore_blocks, 16);

    Backward gqa = b; // GQA at d128: the walk over the group, ordered too; a pair is a (sequence, KV head)
    gqa.fwd.heads_k = 4;
    const BackwardPlan g = plan_ordered(gqa);
    EXPECT_TRUE(g.ordered_dq);
    EXPECT_TRUE(g.kv_major);
    EXPECT_FALSE(g.dkv_scratch);
    EXPECT_EQ(g.ctas, 8 * 2 * 4);           // key blocks x batch x KV heads
    EXPECT_EQ(g.dq_section_pairs, 6);       // of 2 x 4 pairs of 4 heads' rows (4 MB each)
    EXPECT_EQ(g.dq_semaphore_blocks, 13);   // counters per query head, as without the walk
    EXPECT_EQ(g.workspace.size(Piece::dq_semaphore), size_t(2) * 16 * 13 * 4);
    Backward long_gqa = long_rows; // 64 MB per (sequence, KV head) of 4 heads at 16k: one pair a section
    long_gqa.fwd.heads_k = 8;
    const BackwardPlan lg = plan(long_gqa, h200(), overrides("deterministic_dq=ordered,backward_gqa=kv_major"));
    EXPECT_TRUE(lg.kv_major);
    EXPECT_EQ(lg.dq_section_pairs, 1);
    Backward gqa256 = d256; // d256 walks the group too, ordered (its staged dQ counted per head)
    gqa256.fwd.heads_k = 4;
    const BackwardPlan g256 = plan_ordered(gqa256);
    EXPECT_TRUE(g256.ordered_dq);
    EXPECT_TRUE(g256.kv_major);
    EXPECT_FALSE(g256.dkv_scratch);
    EXPECT_EQ(g256.ctas, 13 * 2 * 4); // key blocks x batch x KV heads
    Backward causal256 = gqa256; // but not under a causal mask, as outside deterministic mode: the scratch
    causal256.fwd.causal = true;
    EXPECT_FALSE(plan_ordered(causal256).kv_major);
    EXPECT_TRUE(plan_ordered(causal256).dkv_scratch);
    Backward chunked = gqa; // the chunks' CTAs walk key blocks: no group walk
    EXPECT_FALSE(plan(chunked, h200(), overrides("deterministic_dq=chunks,backward_gqa=kv_major")).kv_major);
}

// Automatic: the ordered dQ at d64, d128 and d256 (where the ordered instance exists, for every
// length); the chunks where asked for.
TEST(PlannerBackward, DeterministicOrderedDqWhereItMeasuredFaster) {
    Backward b;
    b.deterministic = true;
    EXPECT_TRUE(plan(b).ordered_dq); // d128, 1024 keys
    EXPECT_EQ(plan(b).dq_chunk_stride, 0);
    Backward long_keys = b;
    long_keys.fwd.seqlen_k = 4096;
    EXPECT_TRUE(plan(long_keys).ordered_dq);
    EXPECT_FALSE(plan(b, h200(), overrides("deterministic_dq=chunks")).ordered_dq);
    EXPECT_GT(plan(b, h200(), overrides("deterministic_dq=chunks")).dq_chunk_stride, 0);
    Backward d256 = b;
    d256.fwd.head_dim = 256;
    EXPECT_TRUE(plan(d256).ordered_dq);
    EXPECT_EQ(plan(d256).kernel, Kernel::backward_sm90);
    Backward d64 = b;
    d64.fwd.head_dim = 64, d64.fwd.seqlen_k = 16384;
    EXPECT_TRUE(plan(d64).ordered_dq);
    EXPECT_EQ(plan(d64).dq_semaphore_rows, 128); // its counters count the d64 kernel's 128-row blocks
    EXPECT_FALSE(plan(d64, h200(), overrides("deterministic_dq=chunks")).ordered_dq);
    EXPECT_EQ(plan(d64).kernel, Kernel::backward_sm90);
}

// Where the ordered dQ is not taken, deterministic mode keeps the chunks: the mma.sync kernel
// (dropout, other devices, short d128, d256 with softcap), softcap / ALiBi (no ordered instance),
// the override.
TEST(PlannerBackward, DeterministicChunksElsewhere) {
    Backward b;
    b.deterministic = true;
    for (const char* what : {"softcap", "dropout", "d256_softcap", "a100", "override", "short"}) {
        SCOPED_TRACE(what);
        Backward c = b;
        DeviceInfo device = h200();
        Overrides o;
        const std::string w = what;
        if (w == "softcap") c.fwd.softcap = 30.0f;
        if (w == "dropout") c.fwd.dropout = 0.1f;
        if (w == "d256_softcap") c.fwd.head_dim = 256, c.fwd.softcap = 30.0f;
        if (w == "a100") device = a100();
        if (w == "override") o = overrides("deterministic_dq=chunks");
        if (w == "short") c.fwd.seqlen_q = 256;
        const BackwardPlan p = plan(c, device, o);
        EXPECT_FALSE(p.ordered_dq);
        EXPECT_EQ(p.workspace.size(Piece::dq_semaphore), 0u);
        EXPECT_GT(p.dq_chunk_stride, 0);
    }
    Backward capped = b;
    capped.fwd.softcap = 30.0f;
    EXPECT_EQ(plan(capped).kernel, Kernel::backward_sm90); // the extras kernel, with chunks
    EXPECT_EQ(plan(b, h200(), overrides("deterministic_dq=chunks")).kernel, Kernel::backward_sm90);
    EXPECT_TRUE(plan(b, h200(), overrides("deterministic_dq=ordered")).ordered_dq);
    Backward d256 = capped;
    d256.fwd.head_dim = 256;
    EXPECT_EQ(plan(d256).kernel, Kernel::backward_sm80); // chunks: the mma.sync kernel measured faster
    EXPECT_EQ(plan(d256, h200(), overrides("backward_kernel=sm90")).kernel, Kernel::backward_sm90);
    Backward plain256 = b;
    plain256.fwd.head_dim = 256;
    EXPECT_EQ(plan(plain256, h200(), overrides("deterministic_dq=chunks")).kernel, Kernel::backward_sm80);
}

TEST(PlannerBackward, DeterministicChunksFillOneWaveWithinTheMemoryBound) {
    Backward b;
    b.deterministic = true; // 32 (sequence, head) pairs on 132 SMs: 4 chunks
    const Overrides chunks = overrides("deterministic_dq=chunks");
    const BackwardPlan p = plan(b, h200(), chunks);
    EXPECT_EQ(p.num_chunks, 4);
    EXPECT_EQ(p.ctas, 4 * 32);
    EXPECT_EQ(p.dq_chunk_stride, int64_t(16) * 2 * 1024 * 128);
    EXPECT_EQ(p.workspace.size(Piece::dq_accum), size_t(4) * 16 * 2 * 1024 * 128 * 4);
    Backward huge = b;
    huge.fwd.batch = 1, huge.fwd.heads = huge.fwd.heads_k = 2, huge.fwd.seqlen_q = huge.fwd.seqlen_k = 131072;
    // 2 pairs want 66 chunks; each chunk's dQ buffer is 128 MB, the bound 4 GB: 32 chunks.
    EXPECT_EQ(plan(huge, h200(), chunks).num_chunks, 32);
    EXPECT_EQ(plan(huge, a100()).num_chunks, 32);
}

// GQA on the Hopper kernel: a CTA per (sequence, KV head, key block) walks the group's query heads,
// dK/dV written once, no scratch; elsewhere (the mma.sync kernel, deterministic chunks) through it.
TEST(PlannerBackward, HopperGqaWalksTheGroupPerKvHead) {
    Backward gqa;
    gqa.fwd.heads_k = 4;
    const BackwardPlan p = plan(gqa);
    EXPECT_EQ(p.kernel, Kernel::backward_sm90);
    EXPECT_TRUE(p.kv_major);
    EXPECT_FALSE(p.dkv_scratch);
    EXPECT_EQ(p.ctas, 8 * 2 * 4); // key blocks x batch x KV heads
    EXPECT_EQ(p.workspace.size(Piece::dk_accum), size_t(0));
    const BackwardPlan mha = plan(Backward{});
    EXPECT_FALSE(mha.kv_major);
    const BackwardPlan sm80 = plan(gqa, h200(), overrides("backward_kernel=sm80"));
    EXPECT_FALSE(sm80.kv_major);
    EXPECT_TRUE(sm80.dkv_scratch);
    EXPECT_FALSE(sm80.dkv_add); // the mma.sync kernel stores per query head
    EXPECT_EQ(sm80.ctas, 8 * 2 * 16);
    Backward det_gqa = gqa; // deterministic: the walk with the ordered dQ (d128)
    det_gqa.deterministic = true;
    const BackwardPlan det = plan(det_gqa);
    EXPECT_TRUE(det.ordered_dq);
    EXPECT_TRUE(det.kv_major);
    EXPECT_FALSE(det.dkv_scratch);
    Backward capped = gqa; // softcap: the walk has no extras instance
    capped.fwd.softcap = 30.0f;
    EXPECT_FALSE(plan(capped).kv_major);
    EXPECT_FALSE(plan(capped, h200(), overrides("backward_gqa=kv_major")).kv_major);
}

// Under a causal mask the Hopper grid ends key-major over its last pairs (BwdArgs::tail_pairs):
// about four waves of CTAs, no more than a 40 MB section of rows but at least two pairs, none left
// pair by pair alone.
TEST(PlannerBackward, HopperCausalGridEndsKeyMajor) {
    Backward causal;
    causal.fwd.batch = 16, causal.fwd.causal = true; // 256 pairs of 8 key blocks, 1 MB of rows each
    const BackwardPlan p = plan(causal);
    EXPECT_EQ(p.kernel, Kernel::backward_sm90);
    EXPECT_EQ(p.tail_pairs, 40); // four waves would be 66 pairs; the section holds 40
    Backward longer = causal;
    longer.fwd.batch = 1, longer.fwd.seqlen_q = longer.fwd.seqlen_k = 16384; // 16 pairs of 128 key blocks
    EXPECT_EQ(plan(longer).tail_pairs, 2); // 16 MB of rows a pair
    Backward wide = longer; // 192 / 128: 23 MB of rows a pair, one to a section, and still two in the tail
    wide.fwd.head_dim = 192, wide.fwd.head_dim_v = 128;
    EXPECT_EQ(plan(wide).tail_pairs, 2);
    Backward one_pair = wide;
    one_pair.fwd.heads = 1, one_pair.fwd.heads_k = 1;
    EXPECT_EQ(plan(one_pair).tail_pairs, 0); // (a lone pair's order is key-major anyway)
    Backward full = causal; // no right window edge: every CTA as long
    full.fwd.causal = false;
    EXPECT_EQ(plan(full).tail_pairs, 0);
    Backward det = causal; // the ordered dQ has its own order
    det.deterministic = true;
    EXPECT_TRUE(plan(det).ordered_dq);
    EXPECT_EQ(plan(det).tail_pairs, 0);
    EXPECT_EQ(plan(causal, h200(), overrides("backward_kernel=sm80")).tail_pairs, 0);
}

// Automatic up to 8192 keys (not at d256 causal), where it measured faster than the scratch; the
// override forces either.
TEST(PlannerBackward, HopperGqaWalkIsForShortKeysUnlessForced) {
    Backward long_gqa;
    long_gqa.fwd.heads_k = 4;
    long_gqa.fwd.seqlen_q = long_gqa.fwd.seqlen_k = 16384;
    const BackwardPlan automatic = plan(long_gqa);
    EXPECT_FALSE(automatic.kv_major);
    EXPECT_TRUE(automatic.dkv_scratch);
    EXPECT_EQ(automatic.ctas, 128 * 2 * 16);
    // The Hopper kernel adds dK / dV into rows per KV head (4 here, not 16 query heads) ...
    EXPECT_TRUE(automatic.dkv_add);
    EXPECT_EQ(automatic.workspace.size(Piece::dk_accum), size_t(4) * automatic.k_rows_total * automatic.tile_dim * 4);
    EXPECT_EQ(automatic.workspace.size(Piece::dv_accum), automatic.workspace.size(Piece::dk_accum));
    Backward det_long = long_gqa; // ... but not in deterministic mode, whose sums run in a fixed order
    det_long.deterministic = true;
    const BackwardPlan det = plan(det_long, h200(), overrides("backward_gqa=scratch"));
    EXPECT_TRUE(det.dkv_scratch);
    EXPECT_FALSE(det.dkv_add);
    EXPECT_EQ(det.workspace.size(Piece::dk_accum), size_t(16) * det.k_rows_total * det.tile_dim * 4);
    const BackwardPlan forced = plan(long_gqa, h200(), overrides("backward_gqa=kv_major"));
    EXPECT_TRUE(forced.kv_major);
    EXPECT_FALSE(forced.dkv_scratch);
    EXPECT_EQ(forced.ctas, 128 * 2 * 4);
    Backward short_gqa;
    short_gqa.fwd.heads_k = 4;
    short_gqa.fwd.seqlen_q = short_gqa.fwd.seqlen_k = 8192; // up to 8192 keys, in both modes
    EXPECT_TRUE(plan(short_gqa).kv_major);
    Backward short_det = short_gqa;
    short_det.deterministic = true;
    EXPECT_TRUE(plan(short_det).kv_major);
    EXPECT_FALSE(plan(short_det).dkv_scratch);
    short_gqa.fwd.seqlen_q = short_gqa.fwd.seqlen_k = 2048;
    EXPECT_TRUE(plan(short_gqa).kv_major);
    const BackwardPlan scratch = plan(short_gqa, h200(), overrides("backward_gqa=scratch"));
    EXPECT_FALSE(scratch.kv_major);
    EXPECT_TRUE(scratch.dkv_scratch);
    EXPECT_FALSE(plan(Backward{}, h200(), overrides("backward_gqa=kv_major")).kv_major); // MHA: nothing to walk
    Backward d256_causal = short_gqa; // measured slower there
    d256_causal.fwd.head_dim = 256;
    EXPECT_TRUE(plan(d256_causal).kv_major);
    d256_causal.fwd.causal = true;
    EXPECT_FALSE(plan(d256_causal).kv_major);
    EXPECT_TRUE(plan(d256_causal, h200(), overrides("backward_gqa=kv_major")).kv_major);
    // Causal with groups of 8: a CTA per pair of query heads (the whole group's walk makes CTAs too
    // long for the grid's end), adding dK / dV into fp32 rows per KV head, at any length.
    Backward group8 = short_gqa;
    group8.fwd.heads = 64, group8.fwd.heads_k = 8, group8.fwd.causal = true;
    const BackwardPlan pairs = plan(group8);
    EXPECT_TRUE(pairs.kv_major);
    EXPECT_EQ(pairs.walk_heads, 2);
    EXPECT_TRUE(pairs.dkv_scratch);
    EXPECT_TRUE(pairs.dkv_add);
    EXPECT_EQ(pairs.ctas, 16 * 2 * 32); // key blocks x batch x pairs of heads
    EXPECT_EQ(pairs.workspace.size(Piece::dk_accum), size_t(8) * pairs.k_rows_total * pairs.tile_dim * 4);
    Backward group8_d256 = group8; // the P/dS schedule too
    group8_d256.fwd.head_dim = 256, group8_d256.fwd.heads = 32, group8_d256.fwd.heads_k = 4;
    EXPECT_EQ(plan(group8_d256).walk_heads, 2);
    Backward group8_long = group8;
    group8_long.fwd.seqlen_q = group8_long.fwd.seqlen_k = 4096;
    EXPECT_EQ(plan(group8_long).walk_heads, 2);
    group8_long.fwd.seqlen_q = group8_long.fwd.seqlen_k = 16384;
    EXPECT_EQ(plan(group8_long).walk_heads, 2);
    EXPECT_TRUE(plan(group8_long).dkv_add);
    group8_long.deterministic = true; // deterministic mode: the scratch past 8192 keys at d128 ...
    EXPECT_FALSE(plan(group8_long).kv_major);
    group8_long.fwd.seqlen_q = group8_long.fwd.seqlen_k = 8192;
    EXPECT_EQ(plan(group8_long).walk_heads, 2);
    Backward group8_long_d256 = group8_long; // ... and past 4096 at d256
    group8_long_d256.fwd.head_dim = 256, group8_long_d256.fwd.heads = 32, group8_long_d256.fwd.heads_k = 4;
    EXPECT_FALSE(plan(group8_long_d256).kv_major);
    group8_long_d256.fwd.seqlen_q = group8_long_d256.fwd.seqlen_k = 4096;
    EXPECT_EQ(plan(group8_long_d256).walk_heads, 2);
    Backward group8_det = group8; // deterministic: the pairs store rows of their own, summed in pair order
    group8_det.deterministic = true;
    const BackwardPlan det_pairs8 = plan(group8_det);
    EXPECT_TRUE(det_pairs8.kv_major);
    EXPECT_EQ(det_pairs8.walk_heads, 2);
    EXPECT_TRUE(det_pairs8.dkv_scratch);
    EXPECT_FALSE(det_pairs8.dkv_add);
    EXPECT_EQ(det_pairs8.workspace.size(Piece::dk_accum), size_t(32) * det_pairs8.k_rows_total * det_pairs8.tile_dim * 4);
    EXPECT_EQ(plan(group8_det, h200(), overrides("backward_gqa=kv_major")).walk_heads, 8);
    EXPECT_FALSE(plan(group8_det, h200(), overrides("backward_gqa=scratch")).kv_major);
    Backward group8_full = group8; // without the mask the whole group's walk stays
    group8_full.fwd.causal = false;
    EXPECT_EQ(plan(group8_full).walk_heads, 8);
    EXPECT_FALSE(plan(group8_full).dkv_scratch);
    Backward group4 = group8; // 32 / 8 causal keeps the whole group's walk
    group4.fwd.heads = 32;
    EXPECT_TRUE(plan(group4).kv_major);
    EXPECT_EQ(plan(group4).walk_heads, 4);
    EXPECT_EQ(plan(group4, h200(), overrides("backward_gqa=kv_pairs")).walk_heads, 2);
    Backward odd = group4; // an odd group has no pairs
    odd.fwd.heads = 24;
    EXPECT_FALSE(plan(odd, h200(), overrides("backward_gqa=kv_pairs")).kv_major);
    group4.deterministic = true; // deterministic: rows per pair, summed in pair order afterwards
    const BackwardPlan det_pairs = plan(group4, h200(), overrides("backward_gqa=kv_pairs"));
    EXPECT_TRUE(det_pairs.kv_major);
    EXPECT_TRUE(det_pairs.ordered_dq);
    EXPECT_FALSE(det_pairs.dkv_add);
    EXPECT_EQ(det_pairs.walk_heads, 2);
    EXPECT_EQ(det_pairs.workspace.size(Piece::dk_accum), size_t(16) * det_pairs.k_rows_total * det_pairs.tile_dim * 4);
    // Deterministic mode takes the pairs at groups of 4 by itself past 1024 keys (2048 here), up to 8192 at d128.
    const BackwardPlan det4 = plan(group4);
    EXPECT_TRUE(det4.kv_major);
    EXPECT_EQ(det4.walk_heads, 2);
    EXPECT_FALSE(det4.dkv_add);
    Backward det4_short = group4; // at 1024 keys the whole group's walk
    det4_short.fwd.seqlen_q = det4_short.fwd.seqlen_k = 1024;
    EXPECT_EQ(plan(det4_short).walk_heads, 4);
    Backward det4_long = group4; // past 8192 keys the scratch
    det4_long.fwd.seqlen_q = det4_long.fwd.seqlen_k = 8192;
    EXPECT_EQ(plan(det4_long).walk_heads, 2);
    det4_long.fwd.seqlen_q = det4_long.fwd.seqlen_k = 16384;
    EXPECT_FALSE(plan(det4_long).kv_major);
    odd.deterministic = true; // an odd group keeps the whole walk
    EXPECT_EQ(plan(odd).walk_heads, 3);
}

TEST(PlannerBackward, GqaAndOddLayoutsGoThroughScratch) {
    Backward gqa;
    gqa.fwd.heads_k = 4;
    const BackwardPlan p = plan(gqa, h200(), overrides("backward_kernel=sm80"));
    EXPECT_TRUE(p.dkv_scratch);
    const size_t dkv = size_t(16) * 2 * 1024 * 128 * 4;
    EXPECT_EQ(p.workspace.size(Piece::dk_accum), dkv);
    EXPECT_EQ(p.workspace.size(Piece::dv_accum), dkv);
    EXPECT_EQ(p.workspace.size(Piece::dsum), size_t(16) * 2 * 1024 * 4);
    Backward odd;
    odd.fwd.head_dim = 36;
    const BackwardPlan o = plan(odd);
    EXPECT_TRUE(o.staging.q && o.staging.k && o.staging.v && o.staging.dout && o.dkv_scratch);
    EXPECT_EQ(o.tile_dim, 64);
    EXPECT_EQ(o.workspace.size(Piece::dout), size_t(2) * 1024 * 16 * 40 * 2);
    size_t total = 0;
    for (size_t i = 0; i < size_t(Piece::count); ++i) total += WorkspaceLayout::rounded(o.workspace.bytes[i]);
    EXPECT_EQ(o.workspace.total, total);
}

// Value head dims unlike the query's: the narrower inputs staged at the wider width, dK/dV through
// the fp32 scratch (whose finishing sums write each output's real columns). (On Hopper's wgmma
// backward, 192 / 128 has a kernel of its own: the next test.)
TEST(PlannerBackward, ValueHeadDimsRunAtTheWiderWidthStaged) {
    Backward mla;
    mla.fwd.head_dim = 192, mla.fwd.head_dim_v = 128;
    const BackwardPlan p = plan(mla, a100());
    EXPECT_EQ(p.tile_dim, 192);
    EXPECT_EQ(p.tile_dim_v, 192);
    EXPECT_EQ(p.kernel, Kernel::backward_sm80);
    EXPECT_TRUE(!p.staging.q && !p.staging.k && p.staging.v && p.staging.dout);
    EXPECT_TRUE(p.dkv_scratch);
    EXPECT_EQ(p.staging.padded_dim, 192);
    EXPECT_EQ(p.staging.padded_dim_v, 192);
    EXPECT_EQ(p.workspace.size(Piece::v), size_t(2) * 1024 * 16 * 192 * 2);
    EXPECT_EQ(p.workspace.size(Piece::dout), size_t(2) * 1024 * 16 * 192 * 2);
    EXPECT_EQ(p.workspace.size(Piece::dv_accum), size_t(16) * 2 * 1024 * 192 * 4);
    Backward wide_v;
    wide_v.fwd.head_dim = 64, wide_v.fwd.head_dim_v = 128;
    const BackwardPlan w = plan(wide_v);
    EXPECT_EQ(w.tile_dim, 128);
    EXPECT_EQ(w.tile_dim_v, 128);
    EXPECT_EQ(w.kernel, Kernel::backward_sm90);
    EXPECT_TRUE(w.staging.q && w.staging.k && !w.staging.v && !w.staging.dout && w.dkv_scratch);
}

// DeepSeek's 192 / 128 on Hopper's wgmma backward: its own instance (tiles::backward_sm90_value_dim,
// the P/dS schedule) reads v and dout and writes dv at 128 columns, nothing staged for the widths;
// its key blocks are 96 keys (tiles::backward_sm90_block_n), the mma.sync kernel's 64.
TEST(PlannerBackward, HopperRunsTheValueDimInstanceAt192And128) {
    Backward mla;
    mla.fwd.head_dim = 192, mla.fwd.head_dim_v = 128;
    const BackwardPlan p = plan(mla);
    EXPECT_EQ(p.kernel, Kernel::backward_sm90);
    EXPECT_EQ(p.tile_dim, 192);
    EXPECT_EQ(p.tile_dim_v, 128);
    EXPECT_EQ(p.block_n, 96);
    EXPECT_EQ(p.num_n_blocks, 11); // 1024 keys: 10 blocks of 96 and one of 64
    EXPECT_EQ(p.num_chunks, 11);
    EXPECT_EQ(p.ctas, 11 * 2 * 16);
    EXPECT_FALSE(p.staging.pad_head_dim);
    EXPECT_EQ(p.staging.padded_dim, 192);
    EXPECT_EQ(p.staging.padded_dim_v, 128);
    EXPECT_TRUE(!p.staging.q && !p.staging.k && !p.staging.v && !p.staging.dout);
    EXPECT_FALSE(p.dkv_scratch);
    EXPECT_FALSE(p.ordered_dq);
    EXPECT_EQ(p.workspace.size(Piece::v), 0u);
    EXPECT_EQ(p.workspace.size(Piece::dout), 0u);
    EXPECT_EQ(p.workspace.size(Piece::dk_accum), 0u);
    EXPECT_EQ(p.workspace.size(Piece::dq_accum), size_t(16) * 2 * 1024 * 192 * 4);
    Backward causal = mla;
    causal.fwd.causal = true;
    EXPECT_EQ(plan(causal).tile_dim_v, 128);
    Backward sink = mla;
    sink.sink = true;
    EXPECT_EQ(plan(sink).tile_dim_v, 128);

    // GQA: the group walk up to 8192 keys without a causal mask (as d256, the same schedule), else
    // the scratch, whose rows are 192 floats for dK and dV alike.
    Backward gqa = mla;
    gqa.fwd.heads_k = 4;
    const BackwardPlan g = plan(gqa);
    EXPECT_EQ(g.tile_dim_v, 128);
    EXPECT_TRUE(g.kv_major);
    EXPECT_EQ(g.ctas, 11 * 2 * 4);
    gqa.fwd.causal = true;
    const BackwardPlan gc = plan(gqa);
    EXPECT_EQ(gc.tile_dim_v, 128);
    EXPECT_FALSE(gc.kv_major);
    EXPECT_TRUE(gc.dkv_scratch);
    EXPECT_TRUE(gc.dkv_add); // rows per KV head, tile_dim (192) floats each for dK and dV alike
    EXPECT_EQ(gc.workspace.size(Piece::dv_accum), size_t(4) * 2 * 1024 * 192 * 4);

    // Deterministic: the ordered dQ, automatic; chunks (softcap, or asked for) keep the staged
    // mma.sync kernel unless the Hopper kernel is forced.
    Backward det = mla;
    det.deterministic = true;
    const BackwardPlan d = plan(det);
    EXPECT_EQ(d.kernel, Kernel::backward_sm90);
    EXPECT_EQ(d.tile_dim_v, 128);
    EXPECT_TRUE(d.ordered_dq);
    EXPECT_EQ(d.num_chunks, 11);
    const BackwardPlan chunks = plan(det, h200(), overrides("deterministic_dq=chunks"));
    EXPECT_EQ(chunks.kernel, Kernel::backward_sm80);
    EXPECT_EQ(chunks.block_n, 64);
    EXPECT_EQ(chunks.tile_dim_v, 192);
    EXPECT_TRUE(chunks.staging.v && chunks.staging.dout);
    const BackwardPlan forced = plan(det, h200(), overrides("deterministic_dq=chunks,backward_kernel=sm90"));
    EXPECT_EQ(forced.kernel, Kernel::backward_sm90);
    EXPECT_EQ(forced.tile_dim_v, 128);
    EXPECT_FALSE(forced.ordered_dq);
    EXPECT_EQ(forced.block_n, 96); // the chunks walk the Hopper kernel's key blocks
    EXPECT_GT(forced.dq_chunk_stride, 0);
    Backward det_capped = det;
    det_capped.fwd.softcap = 30.0f;
    EXPECT_EQ(plan(det_capped).tile_dim_v, 192);
    Backward capped = mla; // softcap outside deterministic mode: the extras kernel
    capped.fwd.softcap = 30.0f;
    EXPECT_EQ(plan(capped).tile_dim_v, 128);

    // A v or dout the kernel cannot address in 16-byte chunks: staged at 128 columns, not 192.
    BwdProblem odd = mla.problem();
    odd.fwd.p.v.data = at(0x30000008);
    odd.p.dout.data = at(0x90000008);
    const BackwardPlan o = plan_backward(odd, h200(), {});
    EXPECT_EQ(o.tile_dim_v, 128);
    EXPECT_TRUE(o.staging.v && o.staging.dout && !o.staging.q && !o.staging.k);
    EXPECT_FALSE(o.staging.pad_head_dim);
    EXPECT_EQ(o.workspace.size(Piece::v), size_t(2) * 1024 * 16 * 128 * 2);
    EXPECT_EQ(o.workspace.size(Piece::dout), size_t(2) * 1024 * 16 * 128 * 2);

    // Dropout, the mma.sync kernel asked for, no sm_90a kernels, no d192 kernels: v and dout staged
    // at 192 (the d256 kernels without d192 ones).
    Backward dropout = mla;
    dropout.fwd.dropout = 0.1f;
    EXPECT_EQ(plan(dropout).tile_dim_v, 192);
    EXPECT_EQ(plan(dropout).kernel, Kernel::backward_sm80);
    EXPECT_EQ(plan(mla, h200(), overrides("backward_kernel=sm80")).tile_dim_v, 192);
    DeviceInfo no_sm90a = h200();
    no_sm90a.sm90_kernels = false;
    EXPECT_EQ(plan(mla, no_sm90a).tile_dim_v, 192);
    DeviceInfo no_192 = h200();
    no_192.tile_dims = {128, 256};
    const BackwardPlan wide = plan(mla, no_192);
    EXPECT_EQ(wide.tile_dim, 256);
    EXPECT_EQ(wide.tile_dim_v, 256);
    EXPECT_EQ(wide.staging.padded_dim_v, 192); // v, dout staged at 192, the 256 kernel reads 192 columns
    EXPECT_TRUE(wide.staging.v && wide.staging.dout && !wide.staging.q && !wide.staging.k);
    // Every other pair of widths keeps the staging at the wider width.
    for (const auto& [dq, dv] : std::initializer_list<std::pair<int, int>>{
             {192, 64}, {176, 128}, {192, 120}, {256, 128}, {128, 192}, {192, 192}}) {
        Backward other;
        other.fwd.head_dim = dq, other.fwd.head_dim_v = dv;
        const BackwardPlan x = plan(other);
        EXPECT_EQ(x.tile_dim_v, x.tile_dim) << dq << "/" << dv;
        EXPECT_EQ(x.staging.pad_head_dim, dq != dv) << dq << "/" << dv;
    }
}

// dsink: atomics into dsink by default (no scratch); deterministic, one term per (head, sequence,
// 16-row block of the dsum pass) in scratch, summed in order.
TEST(PlannerBackward, DeterministicDsinkTermsGetScratch) {
    Backward b;
    b.sink = true;
    const BackwardPlan atomic = plan(b);
    EXPECT_EQ(atomic.dsink_terms, 0);
    EXPECT_EQ(atomic.workspace.size(Piece::dsink_partial), 0u);
    b.deterministic = true;
    b.fwd.seqlen_q = 1000; // 63 row blocks
    const BackwardPlan fixed = plan(b);
    EXPECT_EQ(fixed.dsink_terms, int64_t(16) * 2 * 63);
    EXPECT_EQ(fixed.workspace.size(Piece::dsink_partial), size_t(16) * 2 * 63 * 4);
    Backward no_dsink;
    no_dsink.deterministic = true;
    EXPECT_EQ(plan(no_dsink).workspace.size(Piece::dsink_partial), 0u);
}

// ---------------------------------------------------------------------------------------------
// The overrides' syntax.

TEST(Overrides, ParseAndRefuseWithTheKeyNamed) {
    const Overrides o = parse_overrides("forward_kernel=sm80,backward_kernel=sm90,inference_kernel=split_keys,"
                                        "backward_gqa=scratch,deterministic_dq=chunks,cpu_isa=avx2,"
                                        "cpu_blocks=64x128x32x64");
    EXPECT_EQ(o.forward_kernel, KernelChoice::sm80);
    EXPECT_EQ(o.backward_kernel, KernelChoice::sm90);
    EXPECT_EQ(o.inference_kernel, InferenceChoice::split_keys);
    EXPECT_EQ(o.backward_gqa, GqaBackwardChoice::scratch);
    EXPECT_EQ(o.deterministic_dq, DeterministicDqChoice::chunks);
    EXPECT_EQ(parse_overrides("deterministic_dq=ordered").deterministic_dq, DeterministicDqChoice::ordered);
    EXPECT_EQ(o.cpu_isa, "avx2");
    EXPECT_EQ(o.cpu_fwd_block_k, 128);
    EXPECT_EQ(o.cpu_bwd_block_q, 32);
    for (const char* bad : {"forward_kernel=sm70", "backward_gqa=sm90", "deterministic_dq=yes", "colour=blue", "cpu_blocks=1x2", "forward_kernel"}) {
        try {
            parse_overrides(bad);
            ADD_FAILURE() << bad << " must be refused";
        } catch (const Error& e) {
            EXPECT_EQ(e.status(), FA_ERROR_INVALID_ARGUMENT) << bad;
        }
    }
    EXPECT_EQ(parse_overrides("").forward_kernel, KernelChoice::automatic);
}

} // namespace
} // namespace flashattn::cuda
