// What the two Hopper backward schedules share (bwd_kernel_sm90.cuh: keys as rows, P^T / dS^T from
// registers, d64 and d128; bwd_kernel_sm90_pds.cuh: P and dS through shared memory, d256): the work
// item, the carve-up of shared memory and its mbarriers, the CTA start and the producer warpgroup,
// the consumers' walk over the blocks, the recomputed dS on a (query, key) view, and the dK/dV
// epilogue (the recomputed P is bwd_policies.cuh's recompute_probs, shared with the mma.sync
// kernel). The consumers' products are not shared: which operand lives where, and so which
// warpgroup computes which slice, is what distinguishes the schedules (a traits switch inside one
// kernel body would leave two interleaved kernels in one function, each condition a place for the
// other's bug).
//
// A schedule's traits provide: Element, kHeadDim, kHeadDimV (of V, dO, dV; kHeadDim but in the
// value-dim instance), kBlockM, kBlockN, kQStages, kDoStages (kQStages: dO rides in the Q stage and
// its q_full; 1: a stage of its own, do_full / do_empty), kProducerThreads, kConsumerThreads, kSmemQElems,
// kSmemDoElems, kSmemKElems, kSmemVElems, kSmemScoreElems (the schedule's own P/dS buffers),
// kSmemRowStatsBytes, kSmemDqBytes (0: no dQ hand-off), kDqHandoff, kDqRowStride, kDqBoxCols, kDqBoxBytes,
// kQBoxCols, kDoBoxCols, SmemLayoutQ, SmemLayoutQt, SmemLayoutDo, SmemLayoutDot, SmemLayoutK,
// SmemLayoutV (the producer copies with SwizzledTileCopy).
#pragma once

#include "kernels/backward_sm90/bwd_params_sm90.cuh"
#include "kernels/backward_sm90/bwd_traits_sm90.cuh"
#include "kernels/bwd_args.h"
#include "kernels/kernel_code.h"
#if FLASHATTN_KERNEL_CODE
#include "device/bwd_policies.cuh"
#include "device/fast_exp2.cuh"
#include "device/producer_copies.cuh"
#include "device/score_policies.cuh"
#include "device/tile_ops.cuh"
#include "device/tma_tiles.cuh"

#include <cute/arch/copy_sm90_tma.hpp>
#include <cutlass/arch/barrier.h>
#include <cutlass/arch/reg_reconfig.h>

namespace flashattn::cuda::kernels {

using namespace cute;

// Work item: chunk of key blocks, sequence, query head (as bwd_kernel.cuh); or, on a grid over KV
// heads (args.group_heads > 1), chunk, sequence, and a run of group_heads query heads of one KV
// head (the whole group, or a part of it) walked in turn (set_head picks the current one: h,
// row_stat0).
//
// Grid order. By default the chunks of a (sequence, head) pair are neighbours in blockIdx.x. With
// the ordered dQ (kOrderedDq; args.dq_semaphore: one key block per CTA) a CTA waits for the CTAs of
// its pair's earlier key blocks in the dQ order (from the first key block up, or with
// dq_keys_descending from the last down), so the grid runs them in that order: with rank r the key
// block's position in it and the pairs in sections of dq_section_pairs (the last section holds the
// rest), the pairs fastest within a section (a pair is a (sequence, KV head) on the group walk,
// whose CTAs then wait, head by head, only for the same pair's earlier key blocks),
//   blockIdx.x = section * (dq_section_pairs * key blocks) + r * (pairs in the section) + pair in it.
// Every CTA that a CTA waits for thus has a lower blockIdx.x. Deadlock freedom rests on that and on
// the hardware launching a one-dimensional grid's CTAs in increasing blockIdx.x order (a CTA becomes
// resident only once every lower one has; FlashAttention-3's deterministic backward and CUTLASS's
// stream-K fix-up assume the same): the lowest unfinished CTA is resident and every CTA it waits for
// has finished, so it finishes too, and by induction all do.
struct Sm90BwdWork {
    int chunk, b, h, h_kv;
    int h_first;              // the first query head of the item (h itself on a grid over query heads)
    SequenceBounds seq;
    int k_stored;             // rows of k/v/dk/dv of the sequence (past seqused_k too)
    bool varlen;
    int64_t q_global_row0;    // first row of the sequence in the dQ scratch of a head
    int64_t k_global_row0;    // ... in the dK/dV scratch of a head
    int64_t row_stat0;        // lse / dsum of query row 0 of this (sequence, head); row i at + i

    // kOrderedDq: the kernel instance of the ordered dQ (its grid order; a template argument, so that
    // the other instances keep their code).
    template <bool kOrderedDq = false>
    __device__ __forceinline__ explicit Sm90BwdWork(const BwdArgs& args, cute::bool_constant<kOrderedDq> = {}) {
        const FwdArgs& fa = args.fwd;
        // The grid's units per sequence: query heads, or runs of group_heads of them.
        const int items_per_sequence = fa.num_heads / args.group_heads;
        const unsigned pairs = unsigned(fa.batch) * unsigned(items_per_sequence); // (sequence, unit) items
        int bh;
        if constexpr (kOrderedDq) {
            const unsigned key_blocks = unsigned(args.num_chunks), width = unsigned(args.dq_section_pairs);
            const unsigned section = blockIdx.x / (width * key_blocks);
            const unsigned in_section = blockIdx.x - section * (width * key_blocks);
            const unsigned first_pair = section * width;
            const unsigned here = min(width, pairs - first_pair); // pairs in this section
            const unsigned rank = in_section / here;
            bh = int(first_pair + (in_section - rank * here));
            chunk = args.dq_keys_descending ? int(key_blocks - 1 - rank) : int(rank);
        } else if (args.tail_pairs > 0) { // pair by pair, then the last pairs key-major (bwd_args.h)
            const unsigned key_blocks = unsigned(args.num_chunks), tail = unsigned(args.tail_pairs);
            const unsigned head_ctas = (pairs - tail) * key_blocks;
            if (blockIdx.x < head_ctas) {
                chunk = int(blockIdx.x % key_blocks);
                bh = int(blockIdx.x / key_blocks);
            } else {
                const unsigned r = blockIdx.x - head_ctas;
                chunk = int(r / tail);
                bh = int(pairs - tail + r % tail);
            }
        } else {
            chunk = int(blockIdx.x % unsigned(args.num_chunks));
            bh = int(blockIdx.x / unsigned(args.num_chunks));
        }
        b = bh / items_per_sequence;
        h = (bh - b * items_per_sequence) * args.group_heads;
        h_kv = h / fa.heads_per_kv_head;
        h_first = h;
        seq = sequence_bounds(fa, b);
        k_stored = stored_k_rows(fa, b);
        varlen = fa.cu_seqlens_q != nullptr;
        q_global_row0 = varlen ? seq.q_row0 : int64_t(b) * fa.seqlen_q;
        k_global_row0 = varlen ? seq.k_row0 : int64_t(b) * fa.seqlen_k;
        set_head(args, 0);
    }

    // Query head h_first + i of the item: its lse / dsum rows (and, through h, its Q, dO and dQ rows).
    __device__ __forceinline__ void set_head(const BwdArgs& args, int i) {
        const FwdArgs& fa = args.fwd;
        h = h_first + i;
        row_stat0 = varlen ? int64_t(h) * fa.total_q + seq.q_row0 : (int64_t(b) * fa.num_heads + h) * fa.seqlen_q;
    }

    // The ordered dQ's counter of query block m of query head `head` of this sequence (bwd_args.h,
    // dq_semaphore).
    __device__ __forceinline__ int* dq_counter(const BwdArgs& args, int head, int m) const {
        return args.dq_semaphore + (int64_t(b) * args.fwd.num_heads + head) * args.dq_semaphore_blocks + m;
    }

    // Rows [row0, row0 + rows) of one head of t, (rows, kHeadDim).
    template <typename Element, int kHeadDim>
    __device__ __forceinline__ auto rows_of(const fa_tensor& t, int64_t row0, int head, int rows) const {
        return head_rows<Element, kHeadDim>(t, varlen, b, row0, head, rows);
    }

    // fp32 dQ scratch rows of this (sequence, head) in this chunk's buffer: row i at + i * kHeadDim.
    template <int kHeadDim>
    __device__ __forceinline__ float* dq_rows(const BwdArgs& args) const {
        return dq_rows_of_head<kHeadDim>(args, h);
    }
    template <int kHeadDim>
    __device__ __forceinline__ float* dq_rows_of_head(const BwdArgs& args, int head) const {
        return args.dq_accum + chunk * args.dq_chunk_stride + (int64_t(head) * args.q_rows_total + q_global_row0) * kHeadDim;
    }

    // The ordered dQ: how many key blocks add to query block m's dQ before this CTA's (the key block
    // order of dq_keys_descending, among those dq_key_blocks says meet the block at all).
    template <int kBlockM, int kBlockN>
    __device__ __forceinline__ int dq_rank(const BwdArgs& args, int m) const {
        const KeyBlockRange adders = dq_key_blocks<kBlockM, kBlockN>(args.fwd.mask, seq, m);
        return args.dq_keys_descending ? adders.n_end - 1 - chunk : chunk - adders.n_begin;
    }
};

// Whether query block m0's dQ is added by bulk tensor reductions through params.dq_map
// (host/tensor_maps.h): every block of a dense batch (the map's rows are a sequence's, so the
// hardware drops a box's rows past it), on packed (varlen) rows only blocks that end inside their
// sequence (a box would reach into the next sequence's rows, which other CTAs are adding to); the
// others are added from shared memory with red.global. Both the producer and, with staged dQ, the
// consumers decide by it. Its map coordinates: sm90_bwd_dq_map_row / _sequence.
template <int kBlockM>
__device__ __forceinline__ bool sm90_bwd_dq_by_tma(const Sm90BwdParams& params, const Sm90BwdWork& w, int m0) {
    return params.dq_tma && (!w.varlen || m0 + kBlockM <= w.seq.q_len);
}
__device__ __forceinline__ int sm90_bwd_dq_map_row(const Sm90BwdWork& w, int m0) {
    return w.varlen ? int(w.q_global_row0 + m0) : m0;
}
__device__ __forceinline__ int sm90_bwd_dq_map_sequence(const Sm90BwdWork& w) { return w.varlen ? 0 : w.b; }

// The ordered dQ's counters (bwd_args.h, dq_semaphore): read with acquire and added to with release
// at GPU scope, so that what a key block's CTA added to a dQ block before its arrival is visible to
// the CTA that sees the arrival; the proxy fence orders the bulk reductions (async proxy) after the
// acquire on one side and their completed writes before the release on the other.
__device__ __forceinline__ int load_acquire_gpu(const int* counter) {
    int value;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(value) : "l"(counter) : "memory");
    return value;
}
__device__ __forceinline__ void add_release_gpu(int* counter, int value) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;\n" ::"l"(counter), "r"(value) : "memory");
}
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }

// The columns of v, dout and dv that the kernel reads and writes: fa.head_dim where the instance has
// one head dim (a compile-time choice, so that those instances read no other field), else the value
// head dim.
template <typename Traits>
__device__ __forceinline__ int value_cols(const FwdArgs& fa) {
    return Traits::kHeadDimV == Traits::kHeadDim ? fa.head_dim : fa.head_dim_v;
}

// Shared memory of a schedule: Q[stages], dO[dO stages], K, V, the schedule's P/dS buffers (each
// tile 1024-byte aligned: whole swizzle periods), the dQ hand-off buffer or the staged dQ's region
// (if any; its boxes too), lse[stages][kBlockM], dsum[stages][kBlockM] (fp32), the mbarriers.
template <typename Traits>
struct Sm90BwdSmem {
    using Element = typename Traits::Element;
    static constexpr int kQStages = Traits::kQStages;
    static constexpr int kDoStages = Traits::kDoStages;
    static constexpr bool kOwnDoStage = kDoStages != kQStages;
    static_assert(kDoStages == kQStages || kDoStages == 1, "dO in the Q ring, or one stage of its own");
    static constexpr int kTileBytes = (kQStages * Traits::kSmemQElems + kDoStages * Traits::kSmemDoElems +
                                       Traits::kSmemKElems + Traits::kSmemVElems + Traits::kSmemScoreElems) *
                                      int(sizeof(Element));
    // q_full, q_empty per stage; kv_full, kv_empty; dq_full[2], dq_empty (used with the hand-off
    // only); with dO's own stage do_full, do_empty, extra_read, dq_region_staged.
    static constexpr int kBarriers = 2 * kQStages + 5 + (kOwnDoStage ? 4 : 0);
    static constexpr int kBytes = kTileBytes + Traits::kSmemRowStatsBytes + Traits::kSmemDqBytes + kBarriers * 8;
    static_assert(kBytes == Traits::kSmemBytes && kTileBytes == Traits::kSmemTileBytes,
                  "the traits' shared-memory budget describes this carve-up");
    static_assert(kTileBytes % 1024 == 0, "the dQ hand-off's boxes start on a whole swizzle period");

    Element* q;
    Element* d_o;
    Element* k;
    Element* v;
    Element* scores; // the schedule's P / dS buffers
    float* lse;      // [stage][kBlockM]
    float* dsum;
    float* dq;       // with the hand-off: (kBlockM, kDqRowStride), or the ordered dQ's boxes (Sm90BwdDqBoxes)
    uint64_t* q_full;   // [kQStages] Q, dO, lse, dsum of the stage landed
    uint64_t* q_empty;  // [kQStages] both consumers are done with the stage
    uint64_t* kv_full;
    uint64_t* kv_empty;
    // dq_full[u % 2]: the consumers' dQ of block u is in `dq`. Two, so that each of the two dQ warps
    // that take the blocks in turn (Sm90BwdProducerRoles) has its own: a warp that skips every other
    // phase of one barrier could not tell by parity whether its block's phase or the one two back
    // completed. (Block u + 2 needs block u + 1's read, after block u's wait: a phase never completes
    // twice before its wait.)
    uint64_t* dq_full;
    uint64_t* dq_empty; // the producer has read it
    // Staged dQ (Traits::kDqStaged, no hand-off): dq_staged[s] (dq_full's two mbarriers, one per
    // stage): both consumers' dQ of the stage's block is staged in it. One per stage, so that the
    // consumers, which may stage block u+1 before the producer waits for block u, never complete
    // a barrier's phase twice before its wait (block u+2, the next on the same barrier, needs the
    // stage released after that wait).
    uint64_t* dq_staged;
    // dO's own stage (kOwnDoStage): do_full, its bytes landed; do_empty, both consumers' dV (its last
    // reader) completed; extra_read, the staged dQ's region and P box read by the reductions;
    // dq_region_staged, both consumers' first dQ halves are in them.
    uint64_t* do_full;
    uint64_t* do_empty;
    uint64_t* extra_read;
    uint64_t* dq_region_staged;

    __device__ __forceinline__ explicit Sm90BwdSmem(char* smem) {
        q = reinterpret_cast<Element*>(smem);
        d_o = q + kQStages * Traits::kSmemQElems;
        k = d_o + kDoStages * Traits::kSmemDoElems;
        v = k + Traits::kSmemKElems;
        scores = v + Traits::kSmemVElems;
        dq = reinterpret_cast<float*>(smem + kTileBytes);
        lse = reinterpret_cast<float*>(smem + kTileBytes + Traits::kSmemDqBytes);
        dsum = lse + kQStages * Traits::kBlockM;
        uint64_t* const bar = reinterpret_cast<uint64_t*>(smem + kTileBytes + Traits::kSmemRowStatsBytes +
                                                          Traits::kSmemDqBytes);
        q_full = bar;
        q_empty = bar + kQStages;
        kv_full = bar + 2 * kQStages;
        kv_empty = bar + 2 * kQStages + 1;
        dq_full = bar + 2 * kQStages + 2;
        dq_empty = bar + 2 * kQStages + 4;
        dq_staged = dq_full;
        do_full = bar + 2 * kQStages + 5;
        do_empty = do_full + 1;
        extra_read = do_full + 2;
        dq_region_staged = do_full + 3;
        static_assert(!Traits::kDqStaged || kQStages == 2, "dq_staged: dq_full's two, one per stage");
        static_assert(Traits::kDqStaged == kOwnDoStage, "staged dQ is the schedule with dO's own stage");
    }

    // Staged dQ (Traits::kDqStaged): box b of consumer c of the block in Q stage s (the traits'
    // staged_dq_box says where).
    __device__ __forceinline__ Element* staged_dq_box(int s, int c, int b) const {
        const auto place = Traits::staged_dq_box(c, b);
        char* const base = place.in == Traits::kDqInQStage ? reinterpret_cast<char*>(q + s * Traits::kSmemQElems)
                           : place.in == Traits::kDqInRegion ? reinterpret_cast<char*>(dq)
                                                             : reinterpret_cast<char*>(scores);
        return reinterpret_cast<Element*>(base + place.bytes);
    }

    // By thread 0, before the CTA's one __syncthreads. Roles: Sm90BwdProducerRoles (the producer
    // threads that arrive on q_full and on dq_empty).
    template <typename Roles>
    __device__ __forceinline__ void init_barriers() const {
        for (int s = 0; s < kQStages; ++s) {
            cutlass::arch::ClusterBarrier::init(q_full + s, Roles::kLoaders);
            // (With staged dQ, also the producer thread that reduces from the stage, once it has.)
            cutlass::arch::ClusterBarrier::init(q_empty + s, Traits::kConsumerThreads + (Traits::kDqStaged ? 1 : 0));
        }
        cutlass::arch::ClusterBarrier::init(kv_full, Traits::kProducerThreads);
        cutlass::arch::ClusterBarrier::init(kv_empty, Traits::kConsumerThreads);
        for (int i = 0; i < 2; ++i) cutlass::arch::ClusterBarrier::init(dq_full + i, Traits::kConsumerThreads);
        cutlass::arch::ClusterBarrier::init(dq_empty, Traits::kDqHandoff ? Roles::kBlockDqThreads : 1);
        if constexpr (kOwnDoStage) {
            cutlass::arch::ClusterBarrier::init(do_full, Roles::kLoaders);
            cutlass::arch::ClusterBarrier::init(do_empty, Traits::kConsumerThreads);
            cutlass::arch::ClusterBarrier::init(extra_read, 1); // the dQ thread
            cutlass::arch::ClusterBarrier::init(dq_region_staged, Traits::kConsumerThreads);
        }
        cutlass::arch::fence_barrier_init();
    }

    // Stage s of the Q ring (base: q) as (rows, head dim), and as the (head dim, rows) view; do_stage,
    // dot_stage the same of the dO ring (base: d_o), kHeadDimV wide.
    __device__ __forceinline__ auto q_stage(Element* base, int s) const {
        return make_tensor(make_smem_ptr(base + s * Traits::kSmemQElems), typename Traits::SmemLayoutQ{});
    }
    __device__ __forceinline__ auto qt_stage(Element* base, int s) const {
        return make_tensor(make_smem_ptr(base + s * Traits::kSmemQElems), typename Traits::SmemLayoutQt{});
    }
    __device__ __forceinline__ auto do_stage(Element* base, int s) const {
        return make_tensor(make_smem_ptr(base + s * Traits::kSmemDoElems), typename Traits::SmemLayoutDo{});
    }
    __device__ __forceinline__ auto dot_stage(Element* base, int s) const {
        return make_tensor(make_smem_ptr(base + s * Traits::kSmemDoElems), typename Traits::SmemLayoutDot{});
    }
};

// `other` where a copy of type Copy is the same (one set of per-thread bases), else a new one.
template <typename Copy, typename Other>
__device__ __forceinline__ Copy copy_like(const Other& other, int tid) {
    if constexpr (std::is_same_v<Copy, Other>) {
        return other;
    } else {
        return Copy(tid);
    }
}

// The producer warpgroup (the caller has lowered its registers): K, V of a key block once (by TMA
// from thread 0 where the launcher made their maps, params.kv_tma, else by cp.async from every
// thread; kv_full; refilled once both consumers finished the block, kv_empty), then for every query block
// that meets it Q, dO, lse, dsum into stage q_uses % kQStages (q_full; refilled once both consumers
// released it, q_empty). Both roles walk the same sequence: key blocks n of the chunk, and for each
// the query blocks of q_block_range (empty ranges skip the loads); q_uses counts query blocks over
// the whole walk, kv_uses key blocks with work. Q and dO come by TMA from thread 0 where the
// launcher made their maps (params.q_tma: the stage's q_full then also waits for their bytes), else
// by cp.async from every loading thread. With the dQ hand-off (Traits::kDqHandoff) it adds the
// consumers' dQ of block u-1 to the fp32 scratch after loading block u (dq_full / dq_empty), and
// the last one after the loop: a bulk reduction (cp.reduce.async.bulk .add.f32) per row of the
// block. With the dQ staged in the Q/dO stage (Traits::kDqStaged, bwd_kernel_sm90_pds.cuh) it adds
// block u-1's the same way, with bulk tensor reductions of the consumers' boxes from one thread,
// and releases the stage once they have read it. With the ordered dQ (kOrderedDq) the roles split
// (Sm90BwdProducerRoles): the loaders load, and the dQ threads add each block's dQ as soon as its
// turn comes, then count it (below).
template <typename Traits, bool kGroupWalk, bool kOrderedDq>
__device__ __forceinline__ void sm90_bwd_producer(const Sm90BwdParams& params, const Sm90BwdWork& w,
                                                  const Sm90BwdSmem<Traits>& sm) {
    static_assert(!(kOrderedDq && kGroupWalk) || Traits::kDqHandoff || Traits::kDqStaged,
                  "the ordered dQ walks groups with the hand-off or staged dQ");
    const BwdArgs& args = params.args;
    using Element = typename Traits::Element;
    using Smem = Sm90BwdSmem<Traits>;
    constexpr int kBlockM = Traits::kBlockM;
    constexpr int kBlockN = Traits::kBlockN;
    constexpr int kHeadDim = Traits::kHeadDim;
    constexpr int kQStages = Traits::kQStages;
    const FwdArgs& fa = args.fwd;
    const SequenceBounds& seq = w.seq;
    const int ptid = int(threadIdx.x);
    using Roles = Sm90BwdProducerRoles<Traits, kOrderedDq>;
    const bool loads = !Roles::kSplit || ptid < Roles::kLoaders; // this thread's roles (both unless split)
    const bool adds = !Roles::kSplit || ptid >= Roles::kLoaders;
    const int dq_tid = Roles::kSplit ? ptid - Roles::kLoaders : ptid; // its place among the dQ threads
    using KCopy = SwizzledTileCopy<Element, typename Traits::SmemLayoutK, Traits::kProducerThreads>;
    using VCopy = SwizzledTileCopy<Element, typename Traits::SmemLayoutV, Traits::kProducerThreads>;
    using QCopy = SwizzledTileCopy<Element, typename Traits::SmemLayoutQ, Roles::kLoaders>;
    using DoCopy = SwizzledTileCopy<Element, typename Traits::SmemLayoutDo, Roles::kLoaders>;
    const KCopy copy_k(ptid);
    const VCopy copy_v = copy_like<VCopy>(copy_k, ptid);
    const QCopy copy_q(ptid);
    const DoCopy copy_do = copy_like<DoCopy>(copy_q, ptid);
    const int v_cols = value_cols<Traits>(fa); // of V and dO
    // Row 0 of this head's rows of each input (the K/V rows at seq.k_row0, the Q/dO rows at seq.q_row0).
    const auto first_row = [&](const fa_tensor& t, int64_t row0, int head) {
        return w.template rows_of<Element, kHeadDim>(t, row0, head, 1).data().get();
    };
    const Element* const k_rows = first_row(fa.k, seq.k_row0, w.h_kv);
    const Element* const v_rows = first_row(fa.v, seq.k_row0, w.h_kv);
    Sm90BwdWork wh = w; // the current query head of the item (set_head)
    const int64_t k_stride = fa.k.row_stride, v_stride = fa.v.row_stride;
    const int64_t q_stride = fa.q.row_stride, do_stride = args.dout.row_stride;
    const uint32_t smem_k = cast_smem_ptr_to_uint(sm.k), smem_v = cast_smem_ptr_to_uint(sm.v);
    const uint32_t smem_q = cast_smem_ptr_to_uint(sm.q), smem_do = cast_smem_ptr_to_uint(sm.d_o);
    constexpr uint32_t kQStageBytes = Traits::kSmemQElems * sizeof(Element);
    constexpr uint32_t kDoStageBytes = Traits::kSmemDoElems * sizeof(Element);
    // Q's and dO's TMA boxes issued in turns where they are alike and share the stage's barrier.
    constexpr int kQBoxCols = Traits::kQBoxCols;
    constexpr bool kInterleavedDo =
        !Smem::kOwnDoStage && Traits::kHeadDimV == kHeadDim && Traits::kDoBoxCols == kQBoxCols;
    // One lse or dsum value per producer thread and stage where a stage has half as many rows as the
    // producer threads; else (80- or 128-row stages, or split roles) loader r takes both values of
    // row r, and where the loaders are fewer than the rows (split roles at 80 or 128) of rows r,
    // r + loaders, ... too.
    constexpr bool kBothStats = Roles::kSplit || 2 * kBlockM != Traits::kProducerThreads;
    constexpr bool kStatLoop = kBothStats && Roles::kLoaders < kBlockM;
    static_assert(kBothStats || 2 * kBlockM == Traits::kProducerThreads, "a producer thread per lse / dsum value");
    const bool loads_lse = ptid < kBlockM;
    const int stat_row = loads_lse ? ptid : ptid - kBlockM;
    float* const smem_stat = (loads_lse ? sm.lse : sm.dsum) + stat_row;

    // The dQ of query-block use `use` (first row m0) to the fp32 scratch; rows past the sequence
    // belong to other sequences' rows (or to none) and are skipped. A CTA with one key block adds
    // each row once: dQ thread r adds row r (and r + dQ threads, ..., where the dQ threads are
    // fewer than the rows), kHeadDim floats contiguous in the scratch and in the hand-off buffer,
    // with one bulk reduction each, and releases the buffer once the reductions have read it. A CTA
    // that walks several key blocks (deterministic chunks) adds to the same rows again, once per
    // key block, and two bulk reductions in flight may land in either order: there each dQ thread
    // waits, before the first reduction of a key block, until its reductions of the key block
    // before have completed (bulk_wait_group 0; its rows are the same thread's in every key block),
    // so every address takes its additions in the walk's order. Within a key block the query
    // blocks' rows differ, and the wait is normally long over.
    const bool revisits_rows = !kOrderedDq && (w.chunk + args.num_chunks) * kBlockN < w.k_stored;
    int added_n = -1; // the key block of the last dQ added (revisits_rows)
    // Ordered dQ (deterministic mode, args.dq_semaphore; one key block per CTA): the dQ warp that
    // takes a block (u % 2; Sm90BwdProducerRoles, all of the block's rows dealt to its lanes) waits,
    // before its reductions, until the block's counter shows the arrivals of every key block before
    // this one in the order (one each: dq_key_blocks says which key blocks add to the block at all),
    // and after them, once their writes are performed (not only their reads of the buffer), adds
    // its arrival. The wait's first read is issued before the wait for the consumers' dQ, where it
    // normally costs nothing; the arrival (release_dq) follows at once: these warps load nothing
    // (split roles). A separate kernel instance (kOrderedDq): in the others this code, though never
    // run, cost the 24-register producer (d128) 72-96 B more of spills, some on its copies'
    // addresses.
    constexpr bool ordered = kOrderedDq;
    constexpr bool kAlternate = Roles::kDqWarpsAlternate;
    static_assert(!ordered || !Traits::kDqHandoff || kAlternate, "the ordered hand-off counts a warp per block");
    const bool counts = ordered && Traits::kDqHandoff && adds;
    // Whether this dQ thread adds block use `use` (alternating: its warp's turn), and its place
    // among the threads that add a block.
    const auto adds_block = [&](int use) { return !kAlternate || dq_tid / 32 == use % 2; };
    const int block_dq_tid = kAlternate ? dq_tid % 32 : dq_tid;
    const bool lane0 = ptid % 32 == 0;
    // The counter of query block m of the current query head (on the group walk, wh's: set_head).
    auto counter_of = [&](int m) { return wh.dq_counter(args, wh.h, m); };
    auto release_dq = [&](int m) {
        if (counts) {
            bulk_wait_group<0>();
            fence_proxy_async_global();
            __syncwarp();
            if (lane0) add_release_gpu(counter_of(m), 1);
        }
    };
    // Staged dQ (Traits::kDqStaged): the first dQ thread adds each consumer's boxes (kDqBoxes:
    // Sm90BwdSmem::staged_dq_box) with bulk tensor reductions (params.dq_map), the first half (the
    // region and the P box) once both consumers have staged it (dq_region_staged), releasing them
    // (extra_read) once read, then the second half once both have staged the block (dq_staged),
    // releasing the Q stage (its q_empty arrival) once read. Where the order of additions matters it waits, as above, for the key block
    // before to complete (chunks), or for the block's turn before and the completion after, then
    // counts the block (the ordered dQ: two arrivals per key block, as the consumers' own adds of
    // the blocks that end past the sequence count, one per consumer). The blocks that
    // sm90_bwd_dq_by_tma leaves out the consumers add from the stage themselves; then it only
    // releases the stage.
    auto add_staged_dq = [&](int use, int m0, int head, int n) {
        if constexpr (Traits::kDqStaged) {
            if (dq_tid != 0) return;
            const int s = use % kQStages;
            const bool by_tma = sm90_bwd_dq_by_tma<kBlockM>(params, w, m0);
            int* const counter = ordered ? w.dq_counter(args, head, m0 / kBlockM) : nullptr;
            const int buffer = args.dq_chunk_stride > 0 ? w.chunk : 0;
            // Boxes [first, first + count) of both consumers.
            auto reduce_boxes = [&](int first, int count) {
                CUTE_UNROLL
                for (int c = 0; c < Traits::kConsumerWarpGroups; ++c) {
                    for (int box = first; box < first + count; ++box) {
                        const int col = c * Traits::kColsPerWarpGroup + box * Traits::kDqBoxCols;
                        SM90_TMA_REDUCE_ADD_5D::copy(&params.dq_map, sm.staged_dq_box(s, c, box), col,
                                                     sm90_bwd_dq_map_row(w, m0), sm90_bwd_dq_map_sequence(w), head,
                                                     buffer);
                    }
                }
                bulk_commit_group();
            };
            constexpr int kHalf = Traits::kDqBoxes / 2;
            // The first half (the region and the P box) as soon as both consumers staged it, so that
            // its read is long done when the next block's P is written (extra_read).
            cutlass::arch::ClusterBarrier::wait(sm.dq_region_staged, use & 1);
            if (by_tma) {
                if constexpr (ordered) {
                    const int rank = w.template dq_rank<kBlockM, kBlockN>(args, m0 / kBlockM);
                    const int turn = Traits::kConsumerWarpGroups * rank; // an arrival per consumer and key block
                    while (load_acquire_gpu(counter) < turn) {}
                    fence_proxy_async_global();
                }
                if (revisits_rows && n != added_n) bulk_wait_group<0>();
                added_n = n;
                reduce_boxes(0, kHalf);
                bulk_wait_group_read<0>();
                cutlass::arch::ClusterBarrier::arrive(sm.extra_read);
            }
            // The second half (over the Q stage).
            cutlass::arch::ClusterBarrier::wait(sm.dq_staged + s, (use / kQStages) & 1);
            if (by_tma) {
                reduce_boxes(kHalf, Traits::kDqBoxes - kHalf);
                if constexpr (ordered) {
                    bulk_wait_group<0>();
                    fence_proxy_async_global();
                    add_release_gpu(counter, Traits::kConsumerWarpGroups);
                } else {
                    bulk_wait_group_read<0>();
                }
            } else { // the consumers added every box themselves before staging the second half
                cutlass::arch::ClusterBarrier::arrive(sm.extra_read);
            }
            cutlass::arch::ClusterBarrier::arrive(sm.q_empty + s);
        }
    };
    static_assert(!Traits::kDqStaged || Roles::kSplit, "staged dQ is added by the split roles' dQ thread");
    // The dQ of use `use` (first row m0, its head's scratch rows dq_rows), key block n. With the
    // hand-off, once the consumers' dQ is in the buffer (dq_full[use % 2]) and, ordered, the block's
    // turn has come: by default each row's dQ thread adds it with a bulk reduction; with the ordered
    // dQ (the box layout, sm90_bwd_hand_off_dq) one thread adds the boxes by bulk tensor reductions
    // (params.dq_map) where sm90_bwd_dq_by_tma, and the warp's threads the others from the buffer with
    // red.global, 16 bytes each. Either way the buffer is released once it has been read.
    // head: of that use (read by the staged dQ and the ordered boxes, so by the split roles' call only).
    auto add_dq = [&](int use, int m0, float* dq_rows, int n, int head = 0) {
        if constexpr (Traits::kDqStaged) add_staged_dq(use, m0, head, n);
        if constexpr (Traits::kDqHandoff) {
            int turn = 0, seen = 0; // (lane 0 of the counting warps)
            if (counts && lane0) {
                turn = w.template dq_rank<kBlockM, kBlockN>(args, m0 / kBlockM); // an arrival per key block
                seen = load_acquire_gpu(counter_of(m0 / kBlockM));
            }
            cutlass::arch::ClusterBarrier::wait(sm.dq_full + use % 2, (use / 2) & 1);
            if (counts) {
                if (lane0)
                    while (seen < turn) seen = load_acquire_gpu(counter_of(m0 / kBlockM));
                __syncwarp();
                fence_proxy_async_global();
            }
            if (revisits_rows && n != added_n) bulk_wait_group<0>();
            added_n = n;
            if constexpr (!kOrderedDq) {
                if constexpr (Roles::kBlockDqThreads >= kBlockM) {
                    if (block_dq_tid < kBlockM && m0 + block_dq_tid < seq.q_len) {
                        bulk_reduce_add_f32(dq_rows + int64_t(m0 + block_dq_tid) * kHeadDim,
                                            sm.dq + block_dq_tid * Traits::kDqRowStride, kHeadDim * int(sizeof(float)));
                        bulk_commit_group();
                        bulk_wait_group_read<0>();
                    }
                } else { // fewer dQ threads than rows: rows r, r + dQ threads, ...
                    for (int r = block_dq_tid; r < kBlockM; r += Roles::kBlockDqThreads) {
                        if (m0 + r < seq.q_len)
                            bulk_reduce_add_f32(dq_rows + int64_t(m0 + r) * kHeadDim, sm.dq + r * Traits::kDqRowStride,
                                                kHeadDim * int(sizeof(float)));
                    }
                    bulk_commit_group();
                    bulk_wait_group_read<0>();
                }
            } else if (sm90_bwd_dq_by_tma<kBlockM>(params, w, m0)) {
                if (block_dq_tid == 0) {
                    const int buffer = args.dq_chunk_stride > 0 ? w.chunk : 0;
                    CUTE_UNROLL
                    for (int box = 0; box < kHeadDim / Traits::kDqBoxCols; ++box)
                        SM90_TMA_REDUCE_ADD_5D::copy(&params.dq_map, reinterpret_cast<char*>(sm.dq) + box * Traits::kDqBoxBytes,
                                                     box * Traits::kDqBoxCols, sm90_bwd_dq_map_row(w, m0),
                                                     sm90_bwd_dq_map_sequence(w), head, buffer);
                    bulk_commit_group();
                    bulk_wait_group_read<0>();
                }
            } else { // the rows of the sequence, 16 bytes a thread at a time
                constexpr int kChunks = kHeadDim / 4;
                const uint32_t buffer = cast_smem_ptr_to_uint(sm.dq);
                const int chunks = min(seq.q_len - m0, kBlockM) * kChunks;
                for (int i = block_dq_tid; i < chunks; i += Roles::kBlockDqThreads) {
                    const int r = i / kChunks, col = (i % kChunks) * 4;
                    float4 v;
                    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];\n"
                                 : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
                                 : "r"(buffer + Sm90BwdDqBoxes<Traits>::offset(r, col)));
                    red_add_quad(dq_rows + int64_t(m0 + r) * kHeadDim + col, v);
                }
            }
            cutlass::arch::ClusterBarrier::arrive(sm.dq_empty);
        }
    };

    const int group_heads = kGroupWalk ? args.group_heads : 1;
    int q_uses = 0, kv_uses = 0, last_m0 = 0, last_n = 0;
    float* last_dq_rows = nullptr;
    for (int n = w.chunk; n * kBlockN < w.k_stored; n += args.num_chunks) {
        const int n0 = n * kBlockN;
        const QBlockRange range = q_block_range<kBlockM, kBlockN>(fa.mask, seq, n0);
        if (range.m_end <= range.m_begin) continue;
        const Element* safe = k_rows; // k_len > n0 >= 0 whenever the range is not empty
        if (kv_uses > 0) cutlass::arch::ClusterBarrier::wait(sm.kv_empty, (kv_uses - 1) & 1);
        if (params.kv_tma) {
            if (ptid == 0) { // before this thread's arrival below, so the phase waits for the bytes
                constexpr uint32_t kBytes = (Traits::kSmemKElems + Traits::kSmemVElems) * sizeof(Element);
                cutlass::arch::ClusterTransactionBarrier::expect_transaction(sm.kv_full, kBytes);
                tma_load_tile<kBlockN, kHeadDim, Traits::kKBoxCols>(&params.k_map, sm.kv_full, sm.k, n0, w.h_kv, w.b);
                tma_load_tile<kBlockN, Traits::kHeadDimV, Traits::kVBoxCols>(&params.v_map, sm.kv_full, sm.v, n0,
                                                                              w.h_kv, w.b);
            }
        } else {
            copy_k.load_async(smem_k, k_rows + n0 * k_stride, k_stride, seq.k_len - n0, fa.head_dim, safe);
            copy_v.load_async(smem_v, v_rows + n0 * v_stride, v_stride, seq.k_len - n0, v_cols, safe);
        }
        cutlass::arch::cpasync_barrier_arrive_noinc(sm.kv_full);
        ++kv_uses;
        for (int head = 0; head < group_heads; ++head) { // one pass unless the grid is over KV heads
            wh.set_head(args, head);
            const Element* const q_rows = first_row(fa.q, seq.q_row0, wh.h);
            const Element* const do_rows = first_row(args.dout, seq.q_row0, wh.h);
            const float* const stat_rows = (loads_lse ? args.lse_log2 : args.dsum) + wh.row_stat0;
            float* const dq_rows = Traits::kDqHandoff ? wh.template dq_rows<kHeadDim>(args) : nullptr;
            for (int m = range.m_begin; m < range.m_end; ++m, ++q_uses) {
                const int s = q_uses % kQStages;
                const int m0 = m * kBlockM;
                if (loads) {
                    if (q_uses >= kQStages) cutlass::arch::ClusterBarrier::wait(sm.q_empty + s, ((q_uses / kQStages) - 1) & 1);
                    // dO of this block into its stage (do_stage: s, or 0 with its own stage), by
                    // TMA onto `full` or by cp.async.
                    const auto load_do = [&](uint64_t* full, int do_stage) {
                        if (params.q_tma) {
                            if (ptid == 0) {
                                constexpr int kDoBoxCols = Traits::kDoBoxCols;
                                CUTE_UNROLL
                                for (int c = 0; c < Traits::kHeadDimV / kDoBoxCols; ++c) {
                                    const int offset = do_stage * Traits::kSmemDoElems + c * kBlockM * kDoBoxCols;
                                    SM90_TMA_LOAD_4D::copy(&params.do_map, full, uint64_t(TMA::CacheHintSm90::EVICT_NORMAL),
                                                           sm.d_o + offset, c * kDoBoxCols, m0, wh.h, wh.b);
                                }
                            }
                        } else {
                            copy_do.load_async(smem_do + do_stage * kDoStageBytes, do_rows + m0 * do_stride, do_stride,
                                               seq.q_len - m0, v_cols, safe);
                        }
                    };
                    if (params.q_tma) {
                        if (ptid == 0) { // before this thread's arrival below, so the phase waits for the bytes
                            cutlass::arch::ClusterTransactionBarrier::expect_transaction(
                                sm.q_full + s, kQStageBytes + (Smem::kOwnDoStage ? 0 : kDoStageBytes));
                            CUTE_UNROLL
                            for (int c = 0; c < kHeadDim / kQBoxCols; ++c) {
                                const int offset = s * Traits::kSmemQElems + c * kBlockM * kQBoxCols;
                                SM90_TMA_LOAD_4D::copy(&params.q_map, sm.q_full + s, uint64_t(TMA::CacheHintSm90::EVICT_NORMAL),
                                                       sm.q + offset, c * kQBoxCols, m0, wh.h, wh.b);
                                if constexpr (kInterleavedDo)
                                    SM90_TMA_LOAD_4D::copy(&params.do_map, sm.q_full + s, uint64_t(TMA::CacheHintSm90::EVICT_NORMAL),
                                                           sm.d_o + offset, c * kQBoxCols, m0, wh.h, wh.b);
                            }
                        }
                    } else {
                        copy_q.load_async(smem_q + s * kQStageBytes, q_rows + m0 * q_stride, q_stride, seq.q_len - m0, fa.head_dim, safe);
                    }
                    if constexpr (!Smem::kOwnDoStage) {
                        if (!kInterleavedDo || !params.q_tma) load_do(sm.q_full + s, s);
                    }
                    // Rows past the sequence: lse_log2 +inf (their P 0), dsum 0.
                    if constexpr (kStatLoop) {
                        const float* const lse_rows = args.lse_log2 + wh.row_stat0;
                        const float* const dsum_rows = args.dsum + wh.row_stat0;
                        for (int r = ptid; r < kBlockM; r += Roles::kLoaders) {
                            const bool ok = m0 + r < seq.q_len;
                            cp_async_4_or_zero(sm.lse + s * kBlockM + r, ok ? lse_rows + m0 + r : args.lse_log2_none, true);
                            cp_async_4_or_zero(sm.dsum + s * kBlockM + r, ok ? dsum_rows + m0 + r : dsum_rows, ok);
                        }
                    } else if (!kBothStats || loads_lse) {
                        const bool row_ok = m0 + stat_row < seq.q_len;
                        cp_async_4_or_zero(smem_stat + s * kBlockM,
                                           row_ok ? stat_rows + m0 + stat_row : loads_lse ? args.lse_log2_none : stat_rows,
                                           row_ok || loads_lse);
                        if constexpr (kBothStats) { // and the dsum value of the same row
                            const float* const dsum_rows = args.dsum + wh.row_stat0;
                            cp_async_4_or_zero(sm.dsum + s * kBlockM + stat_row,
                                               row_ok ? dsum_rows + m0 + stat_row : dsum_rows, row_ok);
                        }
                    }
                    cutlass::arch::cpasync_barrier_arrive_noinc(sm.q_full + s);
                    if constexpr (Smem::kOwnDoStage) { // once both consumers' dV of the block before completed
                        if (q_uses > 0) cutlass::arch::ClusterBarrier::wait(sm.do_empty, (q_uses - 1) & 1);
                        if (params.q_tma && ptid == 0)
                            cutlass::arch::ClusterTransactionBarrier::expect_transaction(sm.do_full, kDoStageBytes);
                        load_do(sm.do_full, 0);
                        cutlass::arch::cpasync_barrier_arrive_noinc(sm.do_full);
                    }
                }
                if constexpr (Roles::kSplit) { // this block's dQ in its turn, its arrival at once
                    if (adds && adds_block(q_uses)) {
                        add_dq(q_uses, m0, dq_rows, n, wh.h);
                        release_dq(m0 / kBlockM);
                    }
                } else if (q_uses > 0) { // the previous block's dQ, after this block's loads
                    add_dq(q_uses - 1, last_m0, last_dq_rows, last_n);
                }
                last_m0 = m0;
                last_n = n;
                last_dq_rows = dq_rows;
            }
        }
    }
    if constexpr (!Roles::kSplit) {
        if (q_uses > 0) add_dq(q_uses - 1, last_m0, last_dq_rows, last_n);
    }
    cp_async_wait<0>(); // stay resident until the copies land (the barriers are in this CTA)
}

// The CTA's start in both schedules, after the work item's early return: thread 0 initialises the
// mbarriers before the CTA's only __syncthreads; then warpgroup 0 lowers its registers and runs the
// producer to its end (true: the caller returns), while the consumers raise theirs (false).
template <typename Traits, bool kGroupWalk, bool kOrderedDq = false>
__device__ __forceinline__ bool sm90_bwd_ran_producer(const Sm90BwdParams& params, const Sm90BwdWork& w,
                                                      const Sm90BwdSmem<Traits>& sm) {
    if (threadIdx.x == 0) {
        sm.template init_barriers<Sm90BwdProducerRoles<Traits, kOrderedDq>>();
        if (params.q_tma) {
            cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(&params.q_map));
            cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(&params.do_map));
        }
        if (params.kv_tma) {
            cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(&params.k_map));
            cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(&params.v_map));
        }
        if (params.dq_tma) cute::prefetch_tma_descriptor(reinterpret_cast<const cute::TmaDescriptor*>(&params.dq_map));
    }
    __syncthreads(); // the last CTA-wide barrier
    if (int(threadIdx.x) / 128 == 0) {
        cutlass::arch::warpgroup_reg_dealloc<Traits::kProducerRegs>();
        sm90_bwd_producer<Traits, kGroupWalk, kOrderedDq>(params, w, sm);
        return true;
    }
    cutlass::arch::warpgroup_reg_alloc<Traits::kConsumerRegs>();
    return false;
}

// A consumer's slice of a tiled wgmma for its shared-memory operands, whose descriptors are the same
// in every thread of a warpgroup: taken at the warpgroup's first thread, by an index ptxas can see
// is the same across the warp (a shuffle from lane 0), so that it builds the descriptors in uniform
// registers. From the thread's own index (partition_C's, which the accumulators need) it builds
// them in vector registers and moves both halves to uniform ones at every wgmma.
template <typename Traits, typename TiledMma>
__device__ __forceinline__ auto sm90_bwd_operand_slice(TiledMma const& mma) {
    return mma.get_thread_slice(cutlass::canonical_warp_group_idx() * 128 - Traits::kProducerThreads);
}

// lse of the query rows a thread holds in log2 units, as the stage holds them (args.lse_log2: +inf
// where the row saw no key and for rows past the sequence, so that P = 0 there).
// coords_qk: the thread's (query, key) coordinates, one query per row of the view.
// Sm90BwdStageLse reads one query's as it is used (where holding all of a thread's would crowd its
// registers), sm90_bwd_lse_log2 all of them into an array.
template <typename Coords>
struct Sm90BwdStageLse {
    Coords const& coords_qk;
    const float* stage_lse;
    __device__ __forceinline__ float operator[](int q) const { return stage_lse[get<0>(coords_qk(q, 0))]; }
};
template <int kRows, typename Coords>
__device__ __forceinline__ void sm90_bwd_lse_log2(float (&lse_log2)[kRows], const Sm90BwdStageLse<Coords>& stage) {
    CUTE_UNROLL
    for (int q = 0; q < kRows; ++q) lse_log2[q] = stage[q];
}

// dQ of a block handed to the producer (the schedules with Traits::kDqHandoff): once the producer
// has read the previous block's (dq_empty), the fp32 accumulator to the hand-off buffer (tdQc: each
// register's (query, column), or (column, query) where dQ is transposed; register pairs 2t, 2t + 1
// are neighbouring columns where not), made visible to the async proxy that the producer's bulk
// reductions read through, then dq_full[q_uses % 2]. kBoxes (the ordered dQ): in Sm90BwdDqBoxes'
// layout, for a bulk tensor reduction per box, with the addresses in its per-thread form (a warp's
// 32 stores, transposed 8 columns of 4 rows, or float2 pairs, 8 rows of 4 pairs, cover all 32
// banks); else in padded rows, a bulk reduction per row. As the ordered dQ's link per block the
// rows' reductions, issued and read by one warp, were the longer part (H200, d128 1k: the ordered
// dQ 0.73 -> 0.88 of the default's kernel time with boxes, 16k 0.84 -> 0.99); in the default
// instances the boxes measured 1-9% slower at 1k (their address arithmetic where the consumers'
// registers are scarcest: the GQA walk's block loop took 26 local loads), so those keep the rows
// (docs/perf-log.md, FF).
template <typename Traits, bool kBoxes, typename Smem, typename Acc, typename Coords>
__device__ __forceinline__ void sm90_bwd_hand_off_dq(const Smem& sm, Acc const& acc_dq, Coords const& tdQc,
                                                     int q_uses) {
    if (q_uses > 0) cutlass::arch::ClusterBarrier::wait(sm.dq_empty, (q_uses - 1) & 1);
    if constexpr (kBoxes) {
        auto row_of = [&](int t) { return Traits::kDqTransposed ? get<1>(tdQc(t)) : get<0>(tdQc(t)); };
        auto col_of = [&](int t) { return Traits::kDqTransposed ? get<0>(tdQc(t)) : get<1>(tdQc(t)); };
        const int row0 = row_of(0), col0 = col_of(0);
        int base_row = row0, base_col = col0;
        uint32_t buffer = cast_smem_ptr_to_uint(sm.dq);
        // The bases computed here, not held across the main loop.
        asm volatile("" : "+r"(base_row), "+r"(base_col), "+r"(buffer));
        const Sm90BwdDqBoxes<Traits> boxes(base_row, base_col);
        auto address = [&](int t) { return buffer + boxes.at(row_of(t) - row0, col_of(t) - col0); };
        if constexpr (Traits::kDqTransposed) { // neighbouring queries per register pair: one float each
            CUTE_UNROLL
            for (int t = 0; t < size(acc_dq); ++t)
                asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(address(t)), "f"(acc_dq(t)) : "memory");
        } else {
            CUTE_UNROLL
            for (int t = 0; t < size(acc_dq); t += 2)
                asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(address(t)), "f"(acc_dq(t)), "f"(acc_dq(t + 1))
                             : "memory");
        }
    } else if constexpr (Traits::kDqTransposed) { // (head dim, query) per register: one float each
        CUTE_UNROLL
        for (int t = 0; t < size(acc_dq); ++t)
            sm.dq[get<1>(tdQc(t)) * Traits::kDqRowStride + get<0>(tdQc(t))] = acc_dq(t);
    } else {
        CUTE_UNROLL
        for (int t = 0; t < size(acc_dq); t += 2) {
            const int row = get<0>(tdQc(t)), col = get<1>(tdQc(t));
            *reinterpret_cast<float2*>(sm.dq + row * Traits::kDqRowStride + col) = make_float2(acc_dq(t), acc_dq(t + 1));
        }
    }
    cutlass::arch::fence_view_async_shared(); // dQ (generic stores) -> the producer's bulk reductions
    cutlass::arch::ClusterBarrier::arrive(sm.dq_full + q_uses % 2);
}

// dS = P (dP - dsum[query]) in place on dP's (query, key) view (P already carries the softcap
// derivative where the extras kernel applies one).
template <typename Grads, typename Probs, typename Coords>
__device__ __forceinline__ void sm90_bwd_dscores(Grads& grads_qk, Probs const& probs_qk, Coords const& coords_qk,
                                                 const float* stage_dsum) {
    CUTE_UNROLL
    for (int q = 0; q < size<0>(grads_qk); ++q) {
        const float dsum = stage_dsum[get<0>(coords_qk(q, 0))];
        CUTE_UNROLL
        for (int k = 0; k < size<1>(grads_qk); ++k) grads_qk(q, k) = probs_qk(q, k) * (grads_qk(q, k) - dsum);
    }
}

// Epilogue of key block n: dK = scale * dS^T Q, dV = (P keep)^T dO / (1-p), from the consumers'
// registers (tdKc, tdVc: the (key, column) of each register of acc_dk, acc_dv, 2t and 2t+1
// neighbours) to dk/dv (16-bit) or to the per-query-head fp32 scratch. Rows past k_len hold zeros:
// their keys were masked, which is what keys beyond seqused_k receive. Where dK and dV have the same
// shape (one head dim) one loop stores both at the same coordinates; with a value head dim of its
// own, dV (kHeadDimV columns) has its loop.
// To dk/dv, the CTA's last key block goes through shared memory: K's and V's tiles are free then
// (the first barrier: every consumer's wgmmas on them have completed; the producer loads no
// further key block), each thread puts its 16-bit pairs there, and the consumers store whole
// 16-byte chunks, full rows of a warp at a time. Straight from the registers a warp's 4-byte stores
// fall on 8 rows, 16 bytes each, and the timeline build measured the epilogue at ~6.5 us of a
// ~50 us CTA (d128, 1k tokens). Where dk / dv are dense (params.dkv_tma) one thread stores the two
// tiles by TMA instead and waits only until shared memory has been read; the others are done (the
// kernel time of d128 1k causal -1.2%, deterministic -1 to -2.4%: docs/perf-log.md, BB).
// Earlier key blocks (deterministic mode's CTAs walk several) store from the registers, as the
// producer may be refilling K and V for the next one.
// Transposed dK / dV (Traits::kDkvTransposed: dK^T, dV^T, tdKc / tdVc give (column, key), and
// registers 2t, 2t+1 are neighbouring keys, not columns): through shared memory by stmatrix.trans;
// straight to global memory (earlier key blocks) element by element.
template <typename Traits, typename AccK, typename AccV, typename CoordsK, typename CoordsV>
__device__ __forceinline__ void sm90_bwd_store_dkdv(const Sm90BwdParams& params, const Sm90BwdWork& w,
                                                    const Sm90BwdSmem<Traits>& sm, int n, AccK& acc_dk, AccV& acc_dv,
                                                    CoordsK const& tdKc, CoordsV const& tdVc) {
    const BwdArgs& args = params.args;
    using Element = typename Traits::Element;
    constexpr int kBlockN = Traits::kBlockN;
    constexpr int kHeadDim = Traits::kHeadDim;
    constexpr int kHeadDimV = Traits::kHeadDimV;
    constexpr bool kSameShape = kHeadDimV == kHeadDim && std::is_same_v<AccK, AccV>;
    const int n0 = n * kBlockN;
    const int rows_valid = w.k_stored - n0;
    const int v_cols = value_cols<Traits>(args.fwd);
    CUTE_UNROLL
    for (int t = 0; t < size(acc_dk); ++t) {
        acc_dk(t) *= args.dk_scale;
        if constexpr (kSameShape) acc_dv(t) *= args.dv_scale;
    }
    if constexpr (!kSameShape) {
        CUTE_UNROLL
        for (int t = 0; t < size(acc_dv); ++t) acc_dv(t) *= args.dv_scale;
    }
    constexpr bool kTransposed = Traits::kDkvTransposed;
    if (args.dk_accum) {
        // Rows of the KV head (added to), or of the grid's unit (stored): query head, or pair of them.
        const int scratch_head = args.dkv_add ? w.h_kv : w.h_first / args.group_heads;
        if constexpr (kSameShape && !kTransposed) {
            store_dkv_scratch<kHeadDim>(args, scratch_head, w.k_global_row0 + n0, acc_dk, acc_dv, tdKc, rows_valid);
        } else { // rows of kHeadDim floats (the scratch's accum_cols, the tile head dim) for both
            store_dkv_scratch<kHeadDim, kTransposed>(args, scratch_head, w.k_global_row0 + n0, acc_dk, acc_dv, tdKc,
                                                     tdVc, rows_valid);
        }
        return;
    }
    // Without the scratch: one query head per KV head, or a grid over KV heads that summed the
    // group's heads in registers; either way the KV head's rows.
    Tensor mdK = w.template rows_of<Element, kHeadDim>(args.dk, w.seq.k_row0, w.h_kv, w.k_stored);
    Tensor mdV = w.template rows_of<Element, kHeadDimV>(args.dv, w.seq.k_row0, w.h_kv, w.k_stored);
    Tensor dk16 = convert_fragment<Element>(acc_dk);
    Tensor dv16 = convert_fragment<Element>(acc_dv);
    Tensor dk_pairs = recast<uint32_t>(dk16);
    Tensor dv_pairs = recast<uint32_t>(dv16);
    const bool last_key_block = int64_t(n + args.num_chunks) * kBlockN >= w.k_stored;
    if (last_key_block) {
        constexpr uint32_t kEpilogueBarrier = 1; // cutlass::arch::NamedBarrier adds its reserved offset
        using OutK = SwizzledTileCopy<Element, typename Traits::SmemLayoutK, Traits::kConsumerThreads>;
        using OutV = SwizzledTileCopy<Element, typename Traits::SmemLayoutV, Traits::kConsumerThreads>;
        cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kEpilogueBarrier);
        const uint32_t k_at = cast_smem_ptr_to_uint(sm.k), v_at = cast_smem_ptr_to_uint(sm.v);
        if constexpr (kTransposed) {
            // stmatrix.trans (x4: four 8 x 8 tiles): the accumulator's pairs 4i .. 4i + 3 are, of
            // the warp's 16 head-dim rows, rows g and g + 8 (g = lane / 4) of key groups 2i and
            // 2i + 1, two neighbouring keys each; stored transposed, each tile's 8 rows in memory
            // are 8 keys of 8 head-dim columns (16 bytes of a K / V row). Lane l addresses key
            // l % 8 of tile l / 8: head-dim rows 8 ((l / 8) % 2) on, key group l / 16. One address
            // a lane per tile instead of a swizzled address per element (120 st.shared.b16 a
            // thread at 192 / 128).
            const int lane = int(threadIdx.x) % 32;
            auto stage = [&](uint32_t at, auto const& values, auto const& coords, auto* out_copy) {
                using Out = std::remove_pointer_t<decltype(out_copy)>; // its byte_offset
                Tensor pairs = recast<uint32_t>(values);
                int col0 = get<0>(coords(0)), key0 = get<1>(coords(0));
                asm volatile("" : "+r"(col0), "+r"(key0)); // computed here, not hoisted (as below)
                const int col = col0 - lane / 4 + 8 * ((lane / 8) % 2);
                const int key = key0 - 2 * (lane % 4) + lane % 8 + 8 * (lane / 16);
                CUTE_UNROLL
                for (int i = 0; i < size(pairs) / 4; ++i) {
                    const int dcol = get<0>(coords(8 * i)) - get<0>(coords(0));
                    const int dkey = get<1>(coords(8 * i)) - get<1>(coords(0));
                    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(
                                     at + Out::byte_offset(key + dkey, col + dcol)),
                                 "r"(pairs(4 * i)), "r"(pairs(4 * i + 1)), "r"(pairs(4 * i + 2)), "r"(pairs(4 * i + 3)));
                }
            };
            stage(k_at, dk16, tdKc, static_cast<OutK*>(nullptr));
            stage(v_at, dv16, tdVc, static_cast<OutV*>(nullptr));
        } else {
            // The pairs' swizzled addresses from the thread's first (row, column), made opaque so that
            // they are computed here rather than hoisted in front of the main loop (and spilled).
            int row0 = get<0>(tdKc(0)), col0 = get<1>(tdKc(0));
            asm volatile("" : "+r"(row0), "+r"(col0));
            if constexpr (!Traits::kPdSSchedule && kSameShape) {
                // stmatrix (x4: four 8 x 8 tiles, 16 bytes of a row per lane and tile): a wgmma
                // accumulator's pairs 4i .. 4i + 3 are rows g and g + 8 (g = lane / 4 of the warp's 16)
                // of column groups 2i and 2i + 1, so lane l addresses row l % 8 of tile l / 8, i.e.
                // row (l % 8) + 8 ((l / 8) % 2) and column 16 i + 8 (l / 16) of the warp's rows. One
                // address a lane per tile instead of one per pair: the 4-byte stores' 64 swizzled
                // addresses, computed ahead, had spilled into the GQA walk's block loop (17 / 11 local
                // loads a block at d128, now 7 / 2; its kernel 3-8% faster, docs/perf-log.md, DD).
                const int lane = int(threadIdx.x) % 32;
                const int row = row0 - lane / 4 + lane % 8 + 8 * ((lane / 8) % 2);
                const int col = col0 - 2 * (lane % 4) + 8 * (lane / 16);
                CUTE_UNROLL
                for (int i = 0; i < size(dk_pairs) / 4; ++i) {
                    const uint32_t offset = OutK::byte_offset(row, col + 16 * i);
                    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(k_at + offset),
                                 "r"(dk_pairs(4 * i)), "r"(dk_pairs(4 * i + 1)), "r"(dk_pairs(4 * i + 2)),
                                 "r"(dk_pairs(4 * i + 3)));
                    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(v_at + offset),
                                 "r"(dv_pairs(4 * i)), "r"(dv_pairs(4 * i + 1)), "r"(dv_pairs(4 * i + 2)),
                                 "r"(dv_pairs(4 * i + 3)));
                }
            } else {
                CUTE_UNROLL
                for (int t = 0; t < size(acc_dk); t += 2) {
                    const int row = row0 + (get<0>(tdKc(t)) - get<0>(tdKc(0))); // offsets: constants once folded
                    const int col = col0 + (get<1>(tdKc(t)) - get<1>(tdKc(0)));
                    const uint32_t offset = OutK::byte_offset(row, col);
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(k_at + offset), "r"(dk_pairs(t / 2)));
                    if constexpr (kSameShape)
                        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(v_at + offset), "r"(dv_pairs(t / 2)));
                }
            }
            if constexpr (!kSameShape) {
                int vrow0 = get<0>(tdVc(0)), vcol0 = get<1>(tdVc(0));
                asm volatile("" : "+r"(vrow0), "+r"(vcol0));
                CUTE_UNROLL
                for (int t = 0; t < size(acc_dv); t += 2) {
                    const int row = vrow0 + (get<0>(tdVc(t)) - get<0>(tdVc(0)));
                    const int col = vcol0 + (get<1>(tdVc(t)) - get<1>(tdVc(0)));
                    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(v_at + OutV::byte_offset(row, col)), "r"(dv_pairs(t / 2)));
                }
            }
        }
        const int ctid = int(threadIdx.x) - Traits::kProducerThreads;
        if (params.dkv_tma) {
            // Every thread's stores made visible to the async proxy, then one thread stores both
            // tiles by TMA (a box per swizzle-atom column, rows past seqlen_k clipped) and waits only
            // until the copies have read shared memory, which the CTA's exit releases.
            cutlass::arch::fence_view_async_shared();
            cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kEpilogueBarrier);
            if (ctid == 0) {
                tma_store_tile<kBlockN, kHeadDim, Traits::kKBoxCols>(&params.dk_map, sm.k, n0, w.h_kv, w.b);
                tma_store_tile<kBlockN, kHeadDimV, Traits::kVBoxCols>(&params.dv_map, sm.v, n0, w.h_kv, w.b);
                tma_store_arrive();
                tma_store_wait<0>();
            }
            return;
        }
        cutlass::arch::NamedBarrier::sync(Traits::kConsumerThreads, kEpilogueBarrier);
        const OutK out_k(ctid);
        const OutV out_v = copy_like<OutV>(out_k, ctid);
        const int64_t dk_stride = args.dk.row_stride, dv_stride = args.dv.row_stride;
        out_k.store(cast_smem_ptr_to_uint(sm.k), mdK.data().get() + n0 * dk_stride, dk_stride, rows_valid,
                    args.fwd.head_dim);
        out_v.store(cast_smem_ptr_to_uint(sm.v), mdV.data().get() + n0 * dv_stride, dv_stride, rows_valid, v_cols);
        return;
    }
    Tensor gdK = local_tile(mdK, Shape<Int<kBlockN>, Int<kHeadDim>>{}, make_coord(n, 0));
    Tensor gdV = local_tile(mdV, Shape<Int<kBlockN>, Int<kHeadDimV>>{}, make_coord(n, 0));
    if constexpr (kTransposed) {
        auto store = [&](auto& out, auto const& values, auto const& coords, int cols) {
            CUTE_UNROLL
            for (int t = 0; t < size(values); ++t) {
                const int col = get<0>(coords(t)), key = get<1>(coords(t));
                if (key < rows_valid && col < cols) out(key, col) = values(t);
            }
        };
        store(gdK, dk16, tdKc, args.fwd.head_dim);
        store(gdV, dv16, tdVc, v_cols);
    } else {
        CUTE_UNROLL
        for (int t = 0; t < size(acc_dk); t += 2) {
            const int row = get<0>(tdKc(t)), col = get<1>(tdKc(t));
            if (row < rows_valid && col < args.fwd.head_dim) {
                *reinterpret_cast<uint32_t*>(&gdK(row, col)) = dk_pairs(t / 2);
                if constexpr (kSameShape) *reinterpret_cast<uint32_t*>(&gdV(row, col)) = dv_pairs(t / 2);
            }
        }
        if constexpr (!kSameShape) {
            CUTE_UNROLL
            for (int t = 0; t < size(acc_dv); t += 2) {
                const int row = get<0>(tdVc(t)), col = get<1>(tdVc(t));
                if (row < rows_valid && col < v_cols) *reinterpret_cast<uint32_t*>(&gdV(row, col)) = dv_pairs(t / 2);
            }
        }
    }
}

// The consumers' walk, the producer's order (sm90_bwd_producer): for every key block n of the
// chunk, dK and dV cleared; if any query block meets it, on_key_block(n0) (what the key block's
// masked blocks share), once K and V have landed (kv_full), for
// each query head of the item (one unless the grid is over KV heads; on_head(i) first) the query
// blocks of its range, block(m, n0, masked_tag); then K and V released
// (kv_empty: every wgmma reading them has completed); and the key block's epilogue. on_head(i) is
// given the index in the group (query head w.h_first + i); w itself does not move, so that the
// consumers keep no more work-item state live than without the group.
template <typename Traits, bool kGroupWalk, typename AccK, typename AccV, typename CoordsK, typename CoordsV,
          typename Block, typename OnKeyBlock, typename OnHead>
__device__ __forceinline__ void sm90_bwd_consume(const Sm90BwdParams& params, const Sm90BwdWork& w,
                                                 const Sm90BwdSmem<Traits>& sm, AccK& acc_dk, AccV& acc_dv,
                                                 CoordsK const& tdKc, CoordsV const& tdVc, Block&& block,
                                                 OnKeyBlock&& on_key_block, OnHead&& on_head) {
    const BwdArgs& args = params.args;
    constexpr int kBlockM = Traits::kBlockM;
    constexpr int kBlockN = Traits::kBlockN;
    const int group_heads = kGroupWalk ? args.group_heads : 1;
    int kv_uses = 0;
    for (int n = w.chunk; n * kBlockN < w.k_stored; n += args.num_chunks) {
        const int n0 = n * kBlockN;
        const QBlockRange range = q_block_range<kBlockM, kBlockN>(args.fwd.mask, w.seq, n0);
        clear(acc_dk);
        clear(acc_dv);
        if (range.m_end > range.m_begin) {
            on_key_block(n0);
            cutlass::arch::ClusterBarrier::wait(sm.kv_full, kv_uses & 1);
            cutlass::arch::fence_view_async_shared();
            for (int head = 0; head < group_heads; ++head) {
                on_head(head);
                // Masked blocks sit at the two ends of the range: masked, unmasked, masked.
                for (int m = range.m_begin; m < range.m_end;) {
                    for (; m < range.m_end && (m < range.unmasked_begin || m >= range.unmasked_end); ++m)
                        block(m, n0, cute::true_type{});
                    for (; m < range.m_end && m >= range.unmasked_begin && m < range.unmasked_end; ++m)
                        block(m, n0, cute::false_type{});
                }
            }
            cutlass::arch::ClusterBarrier::arrive(sm.kv_empty);
            ++kv_uses;
        }
        sm90_bwd_store_dkdv<Traits>(params, w, sm, n, acc_dk, acc_dv, tdKc, tdVc);
    }
}

} // namespace flashattn::cuda::kernels
#endif // FLASHATTN_KERNEL_CODE
