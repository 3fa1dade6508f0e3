// The CPU backend's entry points: pick the kernel build for this CPU, lend it the thread pool and
// memory, run. The attention algorithm itself lives in kernels/ (see docs/cpu-backend.md).
#include "core/backend.h"
#include "core/error.h"
#include "core/overrides.h"
#include "executor.h"
#include "inference.h"
#include "thread_pool.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

namespace flashattn::cpu {
namespace {

// ---- ISA selection --------------------------------------------------------------------------

// The instruction sets this CPU runs (asked once); the kernel build used is the best of them, or
// the one the overrides name (cpu_isa) when the CPU has it.
struct IsaSupport {
    bool avx2 = false, avx512 = false;
};

const IsaSupport& isa_support() {
    static const IsaSupport support = [] {
        IsaSupport s;
#if defined(FLASHATTN_CPU_X86)
        __builtin_cpu_init();
        s.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                   __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        s.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
        return s;
    }();
    return support;
}

const KernelSet& kernels_for(const std::string& want) {
#if defined(FLASHATTN_CPU_X86)
    const IsaSupport& isa = isa_support();
    if (isa.avx512 && (want.empty() || want == "avx512")) return avx512::kernels;
    if (isa.avx2 && (want.empty() || want == "avx512" || want == "avx2")) return avx2::kernels;
#else
    (void)want;
#endif
    return generic::kernels;
}

// ---- thread pool ----------------------------------------------------------------------------

// Scratch memory kept between calls, up to kWorkspaceCacheBytes: a fresh allocation of a few MiB
// costs its page faults on every call (several percent of a small backward), a cached one nothing.
// Larger workspaces come with problems whose compute dwarfs the faults, and are not kept.
constexpr size_t kWorkspaceCacheBytes = size_t(64) << 20;

struct Workspace {
    char* data = nullptr;
    size_t bytes = 0;
};

struct PoolState {
    std::mutex mutex;                // guards pool creation and resizing
    std::unique_ptr<ThreadPool> pool;
    int requested = 0;               // fa_set_num_threads; 0 = default_num_threads()
    long owner_pid = 0;              // a forked child must not use its parent's (absent) threads
    std::atomic<bool> busy{false};   // a call is using the pool (and the workspace) right now
    Workspace workspace;             // only touched by the call holding `busy`
};

PoolState& pool_state() {
    static PoolState* state = new PoolState(); // never destroyed: threads may outlive static destructors
    return *state;
}

long current_pid() {
#if defined(__unix__) || defined(__APPLE__)
    return static_cast<long>(getpid());
#else
    return 0;
#endif
}

// Holds the pool for one API call. A second call arriving while the pool works (another user
// thread, or a reentrant call) runs on its own thread instead of waiting.
class PoolLease {
public:
    PoolLease() {
        PoolState& state = pool_state();
        bool expected = false;
        if (!state.busy.compare_exchange_strong(expected, true)) return;
        held_ = true;
        std::lock_guard<std::mutex> lock(state.mutex);
        const int want = state.requested > 0 ? state.requested : default_num_threads();
        if (state.pool && state.owner_pid != current_pid()) {
            (void)state.pool.release(); // the threads belong to the parent process; leak the husk
        }
        if (!state.pool || state.pool->size() != want) {
            state.pool.reset();
            state.pool = std::make_unique<ThreadPool>(want);
            state.owner_pid = current_pid();
        }
        pool_ = state.pool.get();
    }
    ~PoolLease() {
        if (held_) pool_state().busy.store(false);
    }
    ThreadPool* pool() const { return pool_; }
    Workspace* workspace() const { return held_ ? &pool_state().workspace : nullptr; }

private:
    bool held_ = false;
    ThreadPool* pool_ = nullptr;
};

// ---- executor -------------------------------------------------------------------------------

void release(Workspace& w) {
    if (w.data) ::operator delete(w.data, std::align_val_t(64));
    w = Workspace{};
}

// Threads and memory for one call: allocations are carved from the cached workspace while it
// lasts, then come from the heap; at the end the cache grows to what the call needed (within the
// cache limit) for the next call.
class CallExecutor final : public Executor {
public:
    CallExecutor(ThreadPool* pool, Workspace* cache) : pool_(pool), cache_(cache) {}
    ~CallExecutor() {
        for (void* block : blocks_) ::operator delete(block, std::align_val_t(64));
        if (cache_ && cache_->bytes < needed_ && needed_ <= kWorkspaceCacheBytes) {
            release(*cache_); // a failed allocation just leaves the cache empty
            cache_->data = static_cast<char*>(::operator new(needed_, std::align_val_t(64), std::nothrow));
            cache_->bytes = cache_->data ? needed_ : 0;
        }
    }

    int workers() const override { return pool_ ? pool_->size() : 1; }

    void parallel_for(int64_t num_tasks, TaskFn fn, void* context) override {
        if (pool_) {
            pool_->run(num_tasks, fn, context);
        } else {
            for (int64_t task = 0; task < num_tasks; ++task) fn(context, task, 0);
        }
    }

    void* allocate(size_t bytes) override {
        bytes = (bytes + 63) & ~size_t(63);
        needed_ += bytes;
        if (cache_ && cache_used_ + bytes <= cache_->bytes) {
            void* piece = cache_->data + cache_used_;
            cache_used_ += bytes;
            return piece;
        }
        void* block = ::operator new(bytes > 0 ? bytes : 64, std::align_val_t(64));
        blocks_.push_back(block);
        return block;
    }

private:
    ThreadPool* pool_;
    Workspace* cache_; // null when this call does not hold the pool
    size_t cache_used_ = 0, needed_ = 0;
    std::vector<void*> blocks_;
};

// The kernel build and tiles of one call (overrides: cpu_isa, cpu_blocks).
struct CallKernels {
    const KernelSet& kernels;
    Tuning tuning;
};
CallKernels call_kernels() {
    const Overrides overrides = current_overrides();
    Tuning tuning;
    tuning.fwd_block_q = overrides.cpu_fwd_block_q;
    tuning.fwd_block_k = overrides.cpu_fwd_block_k;
    tuning.bwd_block_q = overrides.cpu_bwd_block_q;
    tuning.bwd_block_k = overrides.cpu_bwd_block_k;
    return {kernels_for(overrides.cpu_isa), tuning};
}

} // namespace

void forward(const Problem& problem) {
    const fa_fwd_params& p = problem.p;
    if (p.attn_probs && problem.varlen) // the kernels write each sequence's rows; the padding around them is 0
        std::fill_n(p.attn_probs, int64_t(p.batch) * p.num_heads * p.seqlen_q * p.seqlen_k, 0.0f);
    PoolLease lease;
    CallExecutor executor(lease.pool(), lease.workspace());
    const CallKernels call = call_kernels();
    call.kernels.forward(problem, call.tuning, executor);
}

void backward(const BwdProblem& problem) {
    PoolLease lease;
    CallExecutor executor(lease.pool(), lease.workspace());
    const CallKernels call = call_kernels();
    call.kernels.backward(problem, call.tuning, executor);
}

// Append, then attend: every sequence's new rows are in the cache before any sequence reads it.
// The forward honours num_splits (0: its heuristic) like any other forward call.
void kvcache_forward(const KvCacheProblem& problem) {
    PoolLease lease;
    CallExecutor executor(lease.pool(), lease.workspace());
    append_to_cache(problem, executor);
    const Problem attention = attention_with_rotated_queries(problem, executor);
    const CallKernels call = call_kernels();
    call.kernels.forward(attention, call.tuning, executor);
}

void combine(const CombineProblem& problem) {
    PoolLease lease;
    CallExecutor executor(lease.pool(), lease.workspace());
    combine_partials(problem, executor);
}

void set_num_threads(int num_threads) {
    PoolState& state = pool_state();
    std::lock_guard<std::mutex> lock(state.mutex);
    state.requested = num_threads > 0 ? num_threads : 0;
    // The pool is rebuilt at the next call; a running call keeps the old one until it returns.
}

int num_threads() {
    PoolState& state = pool_state();
    std::lock_guard<std::mutex> lock(state.mutex);
    return state.requested > 0 ? state.requested : default_num_threads();
}

} // namespace flashattn::cpu
