// A small persistent pool of std::threads: the CPU backend's only source of parallelism.
//
// Not OpenMP, on purpose: a Python process that has imported torch already carries an OpenMP
// runtime, and a second one in the same process oversubscribes the cores or aborts at load time.
// The pool does one thing: run N independent tasks, handed out dynamically in increasing order to
// whichever thread is free, and return when all of them are done. Which thread runs which task
// never changes a result: every reduction in the kernels has an order fixed by the problem shape.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace flashattn::cpu {

class ThreadPool {
public:
    using TaskFn = void (*)(void* context, int64_t task, int worker);

    // num_threads counts the calling thread, which always works too: 1 = no extra threads.
    explicit ThreadPool(int num_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return num_threads_; }

    // Calls fn(context, task, worker) for every task in [0, num_tasks); worker is in [0, size())
    // and identifies the thread (0 = the caller), so tasks can index per-thread scratch memory.
    // Not reentrant: the backend makes sure only one run() is in flight. Rethrows the first
    // exception a task threw, after every started task has finished.
    void run(int64_t num_tasks, TaskFn fn, void* context);

private:
    void worker_main(int worker);
    void work(int worker);
    bool wait_for_job(uint64_t seen_generation);

    const int num_threads_;
    std::vector<std::thread> threads_;

    std::mutex mutex_;
    std::condition_variable job_posted_;
    std::condition_variable job_finished_;
    std::atomic<uint64_t> generation_{0};
    bool stopping_ = false;

    // The job in flight.
    TaskFn fn_ = nullptr;
    void* context_ = nullptr;
    int64_t num_tasks_ = 0;
    std::atomic<int64_t> next_task_{0};
    std::atomic<int> workers_busy_{0};
    std::exception_ptr error_;
    std::mutex error_mutex_;
};

// FLASHATTN_NUM_THREADS if set to a positive integer, else the cores this process may run on.
int default_num_threads();

} // namespace flashattn::cpu
