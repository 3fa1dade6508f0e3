#include "thread_pool.h"

#include "core/overrides.h"

#include <chrono>
#include <cstdlib>

#if defined(__linux__)
#include <sched.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace flashattn::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#else
    std::this_thread::yield();
#endif
}

// How long a thread spins before it sleeps. The backward runs three phases back to back, and a
// framework calls attention once per layer: waking a sleeping thread costs tens of microseconds,
// spinning briefly costs nothing when the next job comes soon and little when it does not.
constexpr auto kSpinTime = std::chrono::microseconds(100);

template <typename Ready>
bool spin_until(Ready&& ready) {
    const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
    for (int i = 0;; ++i) {
        if (ready()) return true;
        cpu_relax();
        if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
    }
}

} // namespace

int default_num_threads() {
    if (const int n = num_threads_from_environment(); n > 0) return n; // FLASHATTN_NUM_THREADS
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0) {
        const int n = CPU_COUNT(&set);
        if (n > 0) return n;
    }
#endif
    const unsigned n = std::thread::hardware_concurrency();
    return n > 0 ? static_cast<int>(n) : 1;
}

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
    threads_.reserve(num_threads_ - 1);
    for (int worker = 1; worker < num_threads_; ++worker) threads_.emplace_back([this, worker] { worker_main(worker); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        generation_.fetch_add(1);
    }
    job_posted_.notify_all();
    for (auto& thread : threads_) thread.join();
}

void ThreadPool::work(int worker) {
    for (;;) {
        const int64_t task = next_task_.fetch_add(1, std::memory_order_relaxed);
        if (task >= num_tasks_) return;
        try {
            fn_(context_, task, worker);
        } catch (...) {
            std::lock_guard<std::mutex> lock(error_mutex_);
            if (!error_) error_ = std::current_exception();
            next_task_.store(num_tasks_, std::memory_order_relaxed); // hand out nothing more
        }
    }
}

bool ThreadPool::wait_for_job(uint64_t seen_generation) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen_generation; })) {
        std::unique_lock<std::mutex> lock(mutex_);
        job_posted_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen_generation; });
    }
    std::lock_guard<std::mutex> lock(mutex_);
    return !stopping_;
}

void ThreadPool::worker_main(int worker) {
    uint64_t seen = 0;
    for (;;) {
        if (!wait_for_job(seen)) return;
        seen = generation_.load(std::memory_order_acquire);
        work(worker);
        if (workers_busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> lock(mutex_);
            job_finished_.notify_one();
        }
    }
}

void ThreadPool::run(int64_t num_tasks, TaskFn fn, void* context) {
    if (num_tasks <= 0) return;
    if (num_threads_ == 1 || num_tasks == 1) {
        for (int64_t task = 0; task < num_tasks; ++task) fn(context, task, 0);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        fn_ = fn;
        context_ = context;
        num_tasks_ = num_tasks;
        error_ = nullptr;
        next_task_.store(0, std::memory_order_relaxed);
        workers_busy_.store(num_threads_ - 1, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
    }
    job_posted_.notify_all();
    work(0);
    auto all_done = [&] { return workers_busy_.load(std::memory_order_acquire) == 0; };
    if (!spin_until(all_done)) {
        std::unique_lock<std::mutex> lock(mutex_);
        job_finished_.wait(lock, all_done);
    }
    if (error_) std::rethrow_exception(error_);
}

} // namespace flashattn::cpu
