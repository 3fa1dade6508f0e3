// fa_kvcache_forward (flash_attn_with_kvcache) and paged K/V in fa_forward / fa_varlen_forward,
// against the fp64 reference: out and lse within FlashAttention's tolerance rule, and the caches
// after appending bit-identical to the reference's (rows that must not be read hold NaN, so a
// backend that reads outside a sequence's rows or pages fails the comparison).
//
// The grid is the issue's: seqlen_q {1, 3, 128}, caches up to a few thousand rows, contiguous or
// paged with page sizes {16, 64, 256}, rotary on 0, half or all features in both layouts, left
// padding, cache_batch_idx, GQA ratios 1/4/8, num_splits {1, 0, 7}, plus softcap, ALiBi, windows.
#include "support/device_memory.h"
#include "support/test_support.h"

#include "core/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>
#include <sstream>

namespace flashattn::testing {
namespace {

struct KvCase {
    std::string name;
    Backend backend = Backend::cpu;
    fa_dtype dtype = FA_FLOAT16;
    int batch = 2, seqlen_q = 1, seqlen_new = 1;
    int capacity = 256;               // seqlen_k: the rows one sequence's cache can hold
    int heads = 4, heads_k = 1, head_dim = 64;
    int head_dim_v = 0;               // of the v cache, v_new and out; 0 = head_dim
    bool sink = false;                // learnable sinks (random, one per query head)
    std::vector<int> cache_seqlens;   // rows before appending; empty: random in [0, capacity - seqlen_new]
    int page_size = 0;                // 0: contiguous cache
    double rotary_fraction = 0.0;     // rotary_dim = this fraction of head_dim (even)
    bool rotary_interleaved = false;
    bool leftpad = false, batch_idx = false;
    bool causal = false;
    int window_left = -1, window_right = -1;
    float softcap = 0.0f;
    bool alibi = false;
    int num_splits = 1;
    uint64_t seed = 1;

    // even, at most head_dim (an odd head dim's "all" is head_dim - 1)
    int rotary_dim() const { return std::min(int(std::lround(rotary_fraction * head_dim / 2)) * 2, head_dim / 2 * 2); }
    int value_dim() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
};

std::string describe(const KvCase& c) {
    std::ostringstream s;
    s << dtype_short(c.dtype) << " b" << c.batch << " h" << c.heads << "/" << c.heads_k << " sq" << c.seqlen_q
      << " new" << c.seqlen_new << " cap" << c.capacity << " d" << c.head_dim;
    if (c.head_dim_v > 0) s << "/" << c.head_dim_v;
    if (c.sink) s << " sink";
    if (c.page_size) s << " page" << c.page_size;
    if (c.rotary_dim()) s << " rotary" << c.rotary_dim() << (c.rotary_interleaved ? "i" : "n");
    if (c.leftpad) s << " leftpad";
    if (c.batch_idx) s << " batch_idx";
    if (c.causal) s << " causal";
    if (c.window_left >= 0 || c.window_right >= 0) s << " window(" << c.window_left << "," << c.window_right << ")";
    if (c.softcap > 0) s << " softcap" << c.softcap;
    if (c.alibi) s << " alibi";
    s << " splits" << c.num_splits;
    return s.str();
}

void PrintTo(const KvCase& c, std::ostream* os) { *os << describe(c) << " " << backend_name(c.backend); }

bool same_bytes(const Tensor& a, const Tensor& b) {
    return a.bytes() == b.bytes() && (a.bytes() == 0 || std::memcmp(a.data(), b.data(), a.bytes()) == 0);
}

// The buffers of one KV-cache call and the call itself.
class KvCacheRun {
public:
    explicit KvCacheRun(const KvCase& c) : c_(c) {
        std::mt19937_64 rng(c.seed);
        const int d = c.head_dim, dv = c.value_dim();
        q = Tensor(c.dtype, c.batch, c.seqlen_q, c.heads, d, Layout::bshd);
        out = Tensor(c.dtype, c.batch, c.seqlen_q, c.heads, dv, Layout::bshd);
        q.fill_normal(rng);
        if (c.seqlen_new > 0) {
            // A padded layout: strides the append must honour, gaps it must not read into the cache.
            k_new = Tensor(c.dtype, c.batch, c.seqlen_new, c.heads_k, d, Layout::padded);
            v_new = Tensor(c.dtype, c.batch, c.seqlen_new, c.heads_k, dv, Layout::padded);
            k_new.fill_normal(rng);
            v_new.fill_normal(rng);
        }

        cache_seqlens.assign(c.cache_seqlens.begin(), c.cache_seqlens.end());
        for (int b = int(cache_seqlens.size()); b < c.batch; ++b)
            cache_seqlens.push_back(std::uniform_int_distribution<int>(0, c.capacity - c.seqlen_new)(rng));
        if (c.leftpad)
            for (int b = 0; b < c.batch; ++b)
                leftpad.push_back(std::uniform_int_distribution<int>(0, cache_seqlens[size_t(b)])(rng));

        if (c.page_size) {
            max_blocks = (c.capacity + c.page_size - 1) / c.page_size;
            num_blocks = c.batch * max_blocks + 3;
            table_stride = max_blocks + 1; // a stride above the row length, so it must be honoured
            std::vector<int32_t> blocks(static_cast<size_t>(num_blocks));
            std::iota(blocks.begin(), blocks.end(), 0);
            std::shuffle(blocks.begin(), blocks.end(), rng);
            // Entries a sequence does not need hold an invalid index: reading one is caught.
            block_table.assign(size_t(c.batch * table_stride), -7);
            for (int b = 0; b < c.batch; ++b) {
                const int rows = cache_seqlens[size_t(b)] + c.seqlen_new;
                for (int blk = 0; blk * c.page_size < rows; ++blk)
                    block_table[size_t(b * table_stride + blk)] = blocks[size_t(b * max_blocks + blk)];
            }
            k_cache = Tensor(c.dtype, num_blocks, c.page_size, c.heads_k, d, Layout::bshd);
            v_cache = Tensor(c.dtype, num_blocks, c.page_size, c.heads_k, dv, Layout::bshd);
        } else {
            batch_cache = c.batch_idx ? c.batch + 2 : c.batch;
            if (c.batch_idx) {
                std::vector<int32_t> entries(static_cast<size_t>(batch_cache));
                std::iota(entries.begin(), entries.end(), 0);
                std::shuffle(entries.begin(), entries.end(), rng);
                batch_idx.assign(entries.begin(), entries.begin() + c.batch);
            }
            k_cache = Tensor(c.dtype, batch_cache, c.capacity, c.heads_k, d, Layout::bshd);
            v_cache = Tensor(c.dtype, batch_cache, c.capacity, c.heads_k, dv, Layout::bshd);
        }
        // NaN everywhere except the valid rows [leftpad, cache_seqlens) of every sequence.
        k_cache.poison();
        v_cache.poison();
        std::normal_distribution<double> normal(0.0, 1.0);
        for (int b = 0; b < c.batch; ++b)
            for (int row = c.leftpad ? leftpad[size_t(b)] : 0; row < cache_seqlens[size_t(b)]; ++row)
                for (int h = 0; h < c.heads_k; ++h)
                    for (int e = 0; e < std::max(d, dv); ++e) {
                        const auto [entry, r] = cache_row(b, row);
                        if (e < d) k_cache.set(entry, r, h, e, float(normal(rng)));
                        if (e < dv) v_cache.set(entry, r, h, e, float(normal(rng)));
                    }

        if (c.rotary_dim()) {
            const int half = c.rotary_dim() / 2;
            seqlen_rotary = c.capacity + c.seqlen_q;
            const size_t bytes = size_t(seqlen_rotary) * half * dtype_size(c.dtype);
            rotary_cos.assign(bytes, 0);
            rotary_sin.assign(bytes, 0);
            for (int pos = 0; pos < seqlen_rotary; ++pos)
                for (int t = 0; t < half; ++t) {
                    const double angle = pos * std::pow(10000.0, -2.0 * t / c.rotary_dim());
                    store_float(rotary_cos.data(), c.dtype, int64_t(pos) * half + t, float(std::cos(angle)));
                    store_float(rotary_sin.data(), c.dtype, int64_t(pos) * half + t, float(std::sin(angle)));
                }
        }
        if (c.alibi)
            for (int h = 0; h < c.heads; ++h) alibi_slopes.push_back(std::exp2(-8.0f * float(h + 1) / float(c.heads)));
        lse.assign(size_t(c.batch) * c.heads * c.seqlen_q, 0.0f);
        if (c.sink)
            for (int h = 0; h < c.heads; ++h) sink.push_back(float(normal(rng)));
    }

    // (cache entry or block, row inside it) of cache row `row` of sequence b.
    std::pair<int64_t, int64_t> cache_row(int b, int row) const {
        if (c_.page_size)
            return {block_table[size_t(b * table_stride + row / c_.page_size)], row % c_.page_size};
        return {c_.batch_idx ? batch_idx[size_t(b)] : b, row};
    }

    fa_kvcache_params params(void* k_cache_data, void* v_cache_data) const {
        fa_kvcache_params p;
        fa_kvcache_params_init(&p);
        fa_fwd_params& f = p.fwd;
        f.dtype = c_.dtype;
        f.batch = c_.batch;
        f.seqlen_q = c_.seqlen_q;
        f.seqlen_k = c_.capacity;
        f.num_heads = c_.heads;
        f.num_heads_k = c_.heads_k;
        f.head_dim = c_.head_dim;
        f.head_dim_v = c_.head_dim_v;
        f.learnable_sink = sink.empty() ? nullptr : sink.data();
        f.q = q.view();
        f.k = k_cache.view();
        f.v = v_cache.view();
        f.k.data = k_cache_data;
        f.v.data = v_cache_data;
        f.out = out.view();
        f.softmax_lse = const_cast<float*>(lse.data());
        f.causal = c_.causal;
        f.window_left = c_.window_left;
        f.window_right = c_.window_right;
        f.softcap = c_.softcap;
        f.alibi_slopes = alibi_slopes.empty() ? nullptr : alibi_slopes.data();
        f.num_splits = c_.num_splits;
        f.backend = to_fa_backend(c_.backend);
        if (c_.page_size) {
            f.block_table = block_table.data();
            f.block_table_batch_stride = table_stride;
            f.max_blocks_per_seq = max_blocks;
            f.page_size = c_.page_size;
            f.num_blocks = num_blocks;
        }
        p.batch_cache = batch_cache;
        p.cache_seqlens = cache_seqlens.data();
        p.cache_batch_idx = batch_idx.empty() ? nullptr : batch_idx.data();
        p.cache_leftpad = leftpad.empty() ? nullptr : leftpad.data();
        if (c_.seqlen_new > 0) {
            p.k_new = k_new.view();
            p.v_new = v_new.view();
            p.seqlen_new = c_.seqlen_new;
        }
        if (c_.rotary_dim()) {
            p.rotary_cos = rotary_cos.data();
            p.rotary_sin = rotary_sin.data();
            p.rotary_dim = c_.rotary_dim();
            p.seqlen_rotary = seqlen_rotary;
            p.rotary_interleaved = c_.rotary_interleaved;
        }
        return p;
    }

    // Runs the library on k_cache/v_cache (updated in place); the caller keeps pristine copies.
    fa_status run() {
        out.poison();
        std::fill(lse.begin(), lse.end(), std::numeric_limits<float>::quiet_NaN());
        fa_kvcache_params p = params(k_cache.data(), v_cache.data());
        fa_status status;
        if (c_.backend == Backend::cpu) {
            status = fa_kvcache_forward(&p);
        } else {
            DeviceMirror m;
            auto bytes = [](const auto& v) { return v.size() * sizeof(v[0]); };
            fa_fwd_params& f = p.fwd;
            f.q.data = m.mirror(q.data(), q.bytes(), false);
            f.k.data = m.mirror(k_cache.data(), k_cache.bytes(), true);
            f.v.data = m.mirror(v_cache.data(), v_cache.bytes(), true);
            f.out.data = m.mirror(out.data(), out.bytes(), true);
            f.softmax_lse = static_cast<float*>(m.mirror(lse.data(), bytes(lse), true));
            f.alibi_slopes = static_cast<const float*>(m.mirror(f.alibi_slopes, bytes(alibi_slopes), false));
            f.learnable_sink = static_cast<const float*>(m.mirror(f.learnable_sink, bytes(sink), false));
            f.block_table = static_cast<const int32_t*>(m.mirror(f.block_table, bytes(block_table), false));
            p.cache_seqlens = static_cast<const int32_t*>(m.mirror(p.cache_seqlens, bytes(cache_seqlens), false));
            p.cache_batch_idx = static_cast<const int32_t*>(m.mirror(p.cache_batch_idx, bytes(batch_idx), false));
            p.cache_leftpad = static_cast<const int32_t*>(m.mirror(p.cache_leftpad, bytes(leftpad), false));
            p.k_new.data = m.mirror(p.k_new.data, k_new.bytes(), false);
            p.v_new.data = m.mirror(p.v_new.data, v_new.bytes(), false);
            p.rotary_cos = m.mirror(p.rotary_cos, rotary_cos.size(), false);
            p.rotary_sin = m.mirror(p.rotary_sin, rotary_sin.size(), false);
            // Half of the cases (by seed) take their scratch from a workspace of exactly the size the
            // library asks for, filled with NaN bytes (the call must write what it reads); the others
            // let the library allocate it.
            std::vector<unsigned char> scratch;
            if (c_.seed % 2 == 1) {
                const size_t bytes = fa_kvcache_workspace_size(&p);
                if (bytes > 0) {
                    scratch.assign(bytes, 0xff);
                    p.workspace = m.mirror(scratch.data(), bytes, false);
                    p.workspace_size = bytes;
                }
            }
            status = fa_kvcache_forward(&p);
            if (status == FA_OK) m.copy_outputs_back();
        }
        last_error = fa_last_error();
        return status;
    }

    KvCase c_;
    Tensor q, out, k_new, v_new, k_cache, v_cache;
    std::vector<int32_t> cache_seqlens, leftpad, batch_idx, block_table;
    std::vector<unsigned char> rotary_cos, rotary_sin;
    std::vector<float> alibi_slopes, lse, sink;
    int batch_cache = 1, max_blocks = 0, num_blocks = 0, table_stride = 0, seqlen_rotary = 0;
    std::string last_error;
};

// Runs a case and checks everything: status, caches bit for bit, out and lse against the reference,
// every output written, inputs untouched.
void expect_kvcache_matches_reference(const KvCase& c) {
    KvCacheRun run(c);
    Tensor k_expected = run.k_cache, v_expected = run.v_cache;
    const Tensor q_before = run.q, k_new_before = run.k_new, v_new_before = run.v_new;
    const fa_status status = run.run();
    ASSERT_EQ(status, FA_OK) << describe(c) << ": " << run.last_error;

    const fa_kvcache_params reference_params = run.params(k_expected.data(), v_expected.data());
    const KvCacheProblem problem = make_kvcache_problem(&reference_params);
    const auto fp64 = reference::kvcache_forward(problem, reference::Precision::fp64);
    const auto naive = reference::kvcache_forward(problem, reference::Precision::same_as_inputs);

    EXPECT_TRUE(same_bytes(run.k_cache, k_expected)) << "k_cache after appending differs from the reference's";
    EXPECT_TRUE(same_bytes(run.v_cache, v_expected)) << "v_cache after appending differs from the reference's";
    EXPECT_TRUE(same_bytes(run.q, q_before) && same_bytes(run.k_new, k_new_before) && same_bytes(run.v_new, v_new_before))
        << "q, k_new or v_new was written";
    EXPECT_TRUE(all_written("out", run.out, nullptr));
    const int64_t rows = int64_t(c.batch) * c.seqlen_q;
    EXPECT_TRUE(within_tolerance("out", run.out.canonical(), fp64.out, naive.out, 2.0, c.dtype, nullptr,
                                 {rows, c.heads, c.value_dim()}));
    EXPECT_TRUE(within_tolerance("softmax_lse", to_double(run.lse), fp64.lse, naive.lse, 2.0, FA_FLOAT32, nullptr,
                                 {c.batch, c.heads, c.seqlen_q}));
}

std::vector<KvCase> finish(std::vector<KvCase> cases, Backend backend) {
    std::vector<KvCase> kept;
    std::map<std::string, int> seen;
    for (KvCase c : cases) {
        if (backend == Backend::cuda && c.dtype == FA_FLOAT32) continue;
        c.backend = backend;
        std::string name = sanitize_name(describe(c));
        if (int n = seen[name]++) name += "_" + std::to_string(n + 1);
        c.name = name;
        c.seed = seed_from(name);
        kept.push_back(c);
    }
    return kept;
}

std::vector<KvCase> kvcache_cases(Backend backend) {
    std::vector<KvCase> cases;
    // The grid, every axis covered, the others rotating through their values.
    const int kPages[] = {0, 16, 64, 256};
    const std::pair<double, bool> kRotary[] = {{0.0, false}, {0.5, true}, {0.5, false}, {1.0, true}, {1.0, false}};
    const int kRatios[] = {1, 4, 8};
    const int kSplits[] = {1, 0, 7};
    int n = 0;
    for (int sq : {1, 3, 128})
        for (int page : kPages)
            for (auto [fraction, interleaved] : kRotary) {
                KvCase c;
                c.dtype = n % 2 ? FA_BFLOAT16 : FA_FLOAT16;
                c.seqlen_q = sq;
                c.seqlen_new = sq == 128 && n % 3 == 0 && fraction == 0.0 ? 0 : sq; // some calls append nothing
                c.capacity = sq == 128 ? 384 : (n % 4 == 0 ? 2048 : 300);
                c.heads_k = 2;
                c.heads = c.heads_k * kRatios[n % 3];
                c.head_dim = n % 5 == 4 ? 128 : 64;
                c.page_size = page;
                c.rotary_fraction = fraction;
                c.rotary_interleaved = interleaved;
                c.leftpad = n % 3 == 1;
                c.batch_idx = page == 0 && n % 2 == 1;
                c.causal = sq > 1 ? n % 2 == 0 : n % 4 == 1;
                c.num_splits = kSplits[(n / 3) % 3];
                cases.push_back(c);
                ++n;
            }

    auto variant = [&](auto edit) {
        KvCase c;
        c.seqlen_q = 3;
        c.seqlen_new = 3;
        c.heads = 8;
        c.heads_k = 2;
        edit(c);
        cases.push_back(c);
    };
    // Long caches on the CPU (128k only on the GPU benchmark), decode shape.
    variant([](KvCase& c) { c.seqlen_q = c.seqlen_new = 1; c.capacity = 4096; c.cache_seqlens = {4000, 2500}; c.heads = 32; c.heads_k = 8; c.head_dim = 128; c.dtype = FA_BFLOAT16; c.page_size = 16; c.num_splits = 0; });
    variant([](KvCase& c) { c.seqlen_q = c.seqlen_new = 1; c.capacity = 3000; c.cache_seqlens = {2999, 1000}; c.heads_k = 1; c.causal = true; c.rotary_fraction = 1.0; c.num_splits = 7; });
    // Edges: an empty cache, a cache that the append fills exactly, leftpad equal to the length.
    variant([](KvCase& c) { c.cache_seqlens = {0, 0}; c.causal = true; c.rotary_fraction = 0.5; });
    variant([](KvCase& c) { c.capacity = 64; c.cache_seqlens = {61, 10}; c.page_size = 16; c.causal = true; });
    variant([](KvCase& c) { c.cache_seqlens = {5, 0}; c.leftpad = true; c.seqlen_new = 0; c.seqlen_q = 2; });
    // Score features, windows measured from the cache end, MQA, odd head dims.
    variant([](KvCase& c) { c.softcap = 15.0f; c.alibi = true; c.causal = true; c.page_size = 64; });
    variant([](KvCase& c) { c.window_left = 40; c.window_right = 0; c.rotary_fraction = 1.0; c.capacity = 500; });
    variant([](KvCase& c) { c.window_left = 8; c.window_right = 2; c.seqlen_q = c.seqlen_new = 17; c.leftpad = true; c.alibi = true; });
    variant([](KvCase& c) { c.heads = 6; c.heads_k = 1; c.head_dim = 40; c.rotary_fraction = 0.5; c.rotary_interleaved = true; c.batch_idx = true; });
    variant([](KvCase& c) { c.head_dim = 59; c.dtype = FA_FLOAT32; c.page_size = 16; c.rotary_fraction = 0.5; c.causal = true; });
    variant([](KvCase& c) { c.dtype = FA_FLOAT32; c.seqlen_q = 5; c.seqlen_new = 2; c.causal = true; c.rotary_fraction = 1.0; c.leftpad = true; });
    variant([](KvCase& c) { c.seqlen_q = 1; c.seqlen_new = 4; c.batch = 3; c.causal = true; c.rotary_fraction = 0.5; }); // more keys than queries
    // A value head dim unlike the query's, learnable sinks: with append, rotary, pages, splits.
    variant([](KvCase& c) { c.head_dim = 192; c.head_dim_v = 128; c.sink = true; c.rotary_fraction = 0.5; c.causal = true; });
    variant([](KvCase& c) { c.head_dim_v = 32; c.sink = true; c.page_size = 16; c.num_splits = 0; c.seqlen_q = c.seqlen_new = 1; c.capacity = 1000; c.leftpad = true; });
    variant([](KvCase& c) { c.head_dim_v = 96; c.page_size = 64; c.num_splits = 7; c.rotary_fraction = 1.0; c.rotary_interleaved = true; });
    variant([](KvCase& c) { c.sink = true; c.batch_idx = true; c.alibi = true; c.softcap = 10.0f; c.num_splits = 0; c.seqlen_q = c.seqlen_new = 1; c.capacity = 700; });
    variant([](KvCase& c) { c.sink = true; c.head_dim_v = 24; c.dtype = FA_FLOAT32; c.window_left = 8; c.window_right = 0; c.cache_seqlens = {0, 40}; });
    return finish(cases, backend);
}

// Random combinations of every option above (fixed seed per backend; see
// random_combinations_test.cpp for the dense and varlen calls): shapes, caches and their fill,
// pages, rotary, left padding, cache_batch_idx, GQA, masks, softcap, ALiBi, value head dims, sinks
// and splits, each drawn independently.
std::vector<KvCase> random_kvcache_cases(Backend backend) {
    std::mt19937_64 rng(backend == Backend::cpu ? 0xCAC4E : 0xCAC4F);
    RandomDraws draw{rng};
    const std::vector<int> head_dims{32, 40, 59, 64, 96, 128, 192, 256};
    std::vector<KvCase> cases;
    for (int n = 0; n < 40; ++n) {
        KvCase c;
        c.dtype = backend == Backend::cpu && draw.chance(0.2) ? FA_FLOAT32 : (draw.chance(0.5) ? FA_FLOAT16 : FA_BFLOAT16);
        c.batch = draw.between(1, 3);
        c.seqlen_q = draw.chance(0.5) ? 1 : draw.between(2, 40);
        c.seqlen_new = draw.chance(0.15) ? 0 : (draw.chance(0.6) ? c.seqlen_q : draw.between(1, 40));
        c.capacity = c.seqlen_new + draw.between(0, 600);
        c.heads_k = draw.between(1, 3);
        c.heads = c.heads_k * draw.pick(std::vector<int>{1, 2, 4, 8});
        c.head_dim = draw.pick(head_dims);
        if (draw.chance(0.3)) c.head_dim_v = draw.pick(head_dims);
        c.sink = draw.chance(0.25);
        if (draw.chance(0.5)) c.page_size = draw.pick(std::vector<int>{16, 64, 256});
        if (c.seqlen_new > 0 && draw.chance(0.4)) {
            c.rotary_fraction = draw.pick(std::vector<double>{0.5, 1.0});
            c.rotary_interleaved = draw.chance(0.5);
        }
        c.leftpad = draw.chance(0.25);
        c.batch_idx = c.page_size == 0 && draw.chance(0.3);
        if (draw.chance(0.5)) {
            c.causal = true;
        } else if (draw.chance(0.3)) {
            c.window_left = draw.chance(0.2) ? -1 : draw.between(0, 64);
            c.window_right = draw.chance(0.2) ? -1 : draw.between(0, 16);
        }
        if (draw.chance(0.2)) c.softcap = draw.pick(std::vector<float>{5.0f, 30.0f});
        c.alibi = draw.chance(0.2);
        c.num_splits = draw.pick(std::vector<int>{1, 0, 3, 7});
        cases.push_back(c);
    }
    std::vector<KvCase> named = finish(cases, backend);
    for (size_t i = 0; i < named.size(); ++i) named[i].name = "r" + std::to_string(i) + "_" + named[i].name;
    return named;
}

class KvCacheAttention : public ::testing::TestWithParam<KvCase> {
protected:
    void SetUp() override { FA_SKIP_IF_UNAVAILABLE(GetParam().backend); }
};

TEST_P(KvCacheAttention, MatchesReference) { expect_kvcache_matches_reference(GetParam()); }

std::string kv_param_name(const ::testing::TestParamInfo<KvCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Cpu, KvCacheAttention, ::testing::ValuesIn(kvcache_cases(Backend::cpu)), kv_param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, KvCacheAttention, ::testing::ValuesIn(kvcache_cases(Backend::cuda)), kv_param_name);

class KvCacheRandomCombination : public KvCacheAttention {};
TEST_P(KvCacheRandomCombination, MatchesReference) { expect_kvcache_matches_reference(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Cpu, KvCacheRandomCombination, ::testing::ValuesIn(random_kvcache_cases(Backend::cpu)),
                         kv_param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, KvCacheRandomCombination, ::testing::ValuesIn(random_kvcache_cases(Backend::cuda)),
                         kv_param_name);

// Calling twice appends twice: the second call's keys land after the first's, and see them.
void expect_step_by_step_decode_matches_reference(Backend backend) {
    KvCase c;
    c.backend = backend;
    c.dtype = FA_BFLOAT16;
    c.seqlen_q = c.seqlen_new = 1;
    c.capacity = 128;
    c.cache_seqlens = {20, 33};
    c.heads = 4;
    c.heads_k = 2;
    c.causal = true;
    c.rotary_fraction = 1.0;
    c.page_size = 16;
    KvCacheRun run(c);
    for (int step = 0; step < 4; ++step) {
        Tensor k_expected = run.k_cache, v_expected = run.v_cache;
        ASSERT_EQ(run.run(), FA_OK) << run.last_error;
        const fa_kvcache_params rp = run.params(k_expected.data(), v_expected.data());
        const auto fp64 = reference::kvcache_forward(make_kvcache_problem(&rp), reference::Precision::fp64);
        const auto naive = reference::kvcache_forward(make_kvcache_problem(&rp), reference::Precision::same_as_inputs);
        EXPECT_TRUE(same_bytes(run.k_cache, k_expected)) << "step " << step;
        EXPECT_TRUE(same_bytes(run.v_cache, v_expected)) << "step " << step;
        EXPECT_TRUE(within_tolerance("out", run.out.canonical(), fp64.out, naive.out, 2.0, c.dtype, nullptr,
                                     {c.batch, c.heads, c.head_dim}));
        for (int32_t& len : run.cache_seqlens) ++len; // what a serving loop does between steps
        std::mt19937_64 rng(static_cast<uint64_t>(step));
        run.q.fill_normal(rng);
        run.k_new.fill_normal(rng);
        run.v_new.fill_normal(rng);
    }
}

TEST(KvCacheDecode, StepByStepEqualsOneShot) { expect_step_by_step_decode_matches_reference(Backend::cpu); }
TEST(CudaKvCacheDecode, StepByStepEqualsOneShot) {
    FA_SKIP_IF_UNAVAILABLE(Backend::cuda);
    expect_step_by_step_decode_matches_reference(Backend::cuda);
}

// ---------------------------------------------------------------------------------------------
// Paged K/V in the ordinary entry points (flash_attn_varlen_func(block_table=...)).

struct PagedCase {
    fa_dtype dtype;
    bool varlen;
    std::vector<int> q_lens, k_lens; // varlen; dense uses q_lens[0]/k_lens[0] for every sequence
    int page_size;
    int heads, heads_k, head_dim;
    bool causal;
    Backend backend = Backend::cpu;
    int num_splits = 1;
    float softcap = 0.0f;
};

void expect_paged_forward_matches_reference(const PagedCase& pc) {
    std::mt19937_64 rng(seed_from(std::to_string(pc.page_size) + (pc.varlen ? "v" : "d")));
    const int batch = int(pc.q_lens.size());
    std::vector<int32_t> cu_q{0}, cu_k{0};
    for (int b = 0; b < batch; ++b) {
        cu_q.push_back(cu_q.back() + pc.q_lens[size_t(b)]);
        cu_k.push_back(cu_k.back() + pc.k_lens[size_t(b)]);
    }
    const int max_q = *std::max_element(pc.q_lens.begin(), pc.q_lens.end());
    const int max_k = *std::max_element(pc.k_lens.begin(), pc.k_lens.end());
    const int max_blocks = (max_k + pc.page_size - 1) / pc.page_size;
    const int num_blocks = batch * max_blocks + 2;
    std::vector<int32_t> blocks(static_cast<size_t>(num_blocks));
    std::iota(blocks.begin(), blocks.end(), 0);
    std::shuffle(blocks.begin(), blocks.end(), rng);
    std::vector<int32_t> table(size_t(batch * max_blocks), -1);
    for (int b = 0; b < batch; ++b)
        for (int blk = 0; blk * pc.page_size < pc.k_lens[size_t(b)]; ++blk)
            table[size_t(b * max_blocks + blk)] = blocks[size_t(b * max_blocks + blk)];

    Tensor k(pc.dtype, num_blocks, pc.page_size, pc.heads_k, pc.head_dim, Layout::bshd), v = k;
    k.fill_normal(rng);
    v.fill_normal(rng);
    const int q_batch = pc.varlen ? 1 : batch, q_rows = pc.varlen ? cu_q.back() : max_q;
    Tensor q(pc.dtype, q_batch, q_rows, pc.heads, pc.head_dim, Layout::bshd), out = q;
    q.fill_normal(rng);
    out.poison();
    std::vector<float> lse(size_t(pc.varlen ? pc.heads * cu_q.back() : batch * max_q * pc.heads), 0.0f);

    fa_fwd_params p;
    fa_fwd_params_init(&p);
    p.dtype = pc.dtype;
    p.batch = batch;
    p.seqlen_q = max_q;
    p.seqlen_k = max_k;
    p.num_heads = pc.heads;
    p.num_heads_k = pc.heads_k;
    p.head_dim = pc.head_dim;
    p.q = q.view();
    p.k = k.view();
    p.v = v.view();
    p.out = out.view();
    p.softmax_lse = lse.data();
    p.causal = pc.causal;
    p.softcap = pc.softcap;
    p.num_splits = pc.num_splits;
    p.backend = to_fa_backend(pc.backend);
    p.block_table = table.data();
    p.block_table_batch_stride = max_blocks;
    p.max_blocks_per_seq = max_blocks;
    p.page_size = pc.page_size;
    p.num_blocks = num_blocks;
    std::vector<int32_t> seqused;
    if (pc.varlen) {
        p.cu_seqlens_q = cu_q.data();
        p.cu_seqlens_k = cu_k.data();
        p.total_q = cu_q.back();
        p.total_k = 0; // ignored with a block table
    } else {
        seqused.assign(pc.k_lens.begin(), pc.k_lens.end()); // dense: lengths through seqused_k
        p.seqused_k = seqused.data();
    }
    fa_status status;
    if (pc.backend == Backend::cpu) {
        status = pc.varlen ? fa_varlen_forward(&p) : fa_forward(&p);
    } else {
        DeviceMirror m;
        auto bytes = [](const auto& v) { return v.size() * sizeof(v[0]); };
        fa_fwd_params d = p;
        d.q.data = m.mirror(q.data(), q.bytes(), false);
        d.k.data = m.mirror(k.data(), k.bytes(), false);
        d.v.data = m.mirror(v.data(), v.bytes(), false);
        d.out.data = m.mirror(out.data(), out.bytes(), true);
        d.softmax_lse = static_cast<float*>(m.mirror(lse.data(), bytes(lse), true));
        d.block_table = static_cast<const int32_t*>(m.mirror(table.data(), bytes(table), false));
        d.cu_seqlens_q = static_cast<const int32_t*>(m.mirror(p.cu_seqlens_q, bytes(cu_q), false));
        d.cu_seqlens_k = static_cast<const int32_t*>(m.mirror(p.cu_seqlens_k, bytes(cu_k), false));
        d.seqused_k = static_cast<const int32_t*>(m.mirror(p.seqused_k, bytes(seqused), false));
        status = pc.varlen ? fa_varlen_forward(&d) : fa_forward(&d);
        if (status == FA_OK) m.copy_outputs_back();
    }
    ASSERT_EQ(status, FA_OK) << fa_last_error();

    const Problem problem = make_problem(&p, pc.varlen);
    const auto fp64 = reference::forward(problem, reference::Precision::fp64);
    const auto naive = reference::forward(problem, reference::Precision::same_as_inputs);
    EXPECT_TRUE(all_written("out", out, nullptr));
    EXPECT_TRUE(within_tolerance("out", out.canonical(), fp64.out, naive.out, 2.0, pc.dtype, nullptr,
                                 {int64_t(q_batch) * q_rows, pc.heads, pc.head_dim}));
    EXPECT_TRUE(within_tolerance("softmax_lse", to_double(lse), fp64.lse, naive.lse, 2.0, FA_FLOAT32, nullptr,
                                 {int64_t(lse.size())}));
}

void expect_varlen_paged_forward_matches_reference(Backend backend) {
    for (int page : {16, 64, 256})
        for (bool causal : {false, true}) {
            SCOPED_TRACE("page " + std::to_string(page) + (causal ? " causal" : ""));
            expect_paged_forward_matches_reference(
                {FA_FLOAT16, true, {1, 37, 0, 128, 5}, {300, 37, 19, 600, 0}, page, 8, 2, 64, causal, backend});
        }
    if (backend == Backend::cpu) {
        expect_paged_forward_matches_reference({FA_FLOAT32, true, {3, 9}, {17, 33}, 16, 3, 3, 59, true});
    } else { // a head dim the kernel reads through a padded copy of the pool
        expect_paged_forward_matches_reference({FA_BFLOAT16, true, {3, 9}, {17, 33}, 16, 3, 3, 59, true, backend});
    }
}

void expect_dense_paged_forward_matches_reference(Backend backend) {
    for (int page : {16, 64})
        expect_paged_forward_matches_reference(
            {FA_BFLOAT16, false, {4, 4, 4}, {70, 129, 1}, page, 4, 4, 128, true, backend});
    // Decode through a block table, GQA 4, split-KV (heuristic and fixed), softcap.
    for (int splits : {0, 7})
        expect_paged_forward_matches_reference(
            {FA_FLOAT16, false, {1, 1}, {1000, 333}, 16, 8, 2, 128, false, backend, splits, 20.0f});
}

TEST(PagedAttention, VarlenForwardThroughBlockTable) { expect_varlen_paged_forward_matches_reference(Backend::cpu); }
TEST(PagedAttention, DenseForwardThroughBlockTable) { expect_dense_paged_forward_matches_reference(Backend::cpu); }
TEST(CudaPagedAttention, VarlenForwardThroughBlockTable) {
    FA_SKIP_IF_UNAVAILABLE(Backend::cuda);
    expect_varlen_paged_forward_matches_reference(Backend::cuda);
}
TEST(CudaPagedAttention, DenseForwardThroughBlockTable) {
    FA_SKIP_IF_UNAVAILABLE(Backend::cuda);
    expect_dense_paged_forward_matches_reference(Backend::cuda);
}

} // namespace
} // namespace flashattn::testing
