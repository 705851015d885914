// cblas backend: the worker pool (cblas_workers.h).
// A job is published as one 64-bit word, generation << 32 | end << 16 | front: the units not yet
// claimed are [front, end). The caller claims from the front, helpers from the end, each by a
// compare-and-swap within the same generation, so a late helper can never claim a unit of a job
// that has moved on (the function and context it then reads are still that job's: the job cannot
// finish while one of its units is unclaimed). Why from both ends: cblas_workers.h, csrc/NOTES.md
// v22. Unit 0 is published as claimed by the caller.
#include "cblas_workers.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

#include <sched.h>

namespace lenet::cblas {
namespace {

constexpr auto SPIN = std::chrono::microseconds(200);   // a helper's busy wait for the next job
constexpr int YIELD_AFTER = 4096;                        // a wait's pauses before it yields its core
constexpr int MAX_UNITS = 0xffff;

inline void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// Until v >= target (acquire): pauses, and every YIELD_AFTER of them a yield (the thread waited
// for may need this core).
template <class T>
void wait_for(const std::atomic<T>& v, T target) {
    for (int i = 1; v.load(std::memory_order_acquire) < target; ++i) {
        pause();
        if (i % YIELD_AFTER == 0) sched_yield();
    }
}

inline uint32_t gen_of(uint64_t s) { return uint32_t(s >> 32); }
inline int end_of(uint64_t s) { return int((s >> 16) & 0xffff); }
inline int front_of(uint64_t s) { return int(s & 0xffff); }
constexpr uint64_t ONE_FROM_END = uint64_t(1) << 16;

}  // namespace

struct Workers::Pool {
    using Fn = void (*)(void*, int, int);

    alignas(64) std::atomic<uint64_t> state{0};
    std::atomic<Fn> fn{nullptr};
    std::atomic<void*> ctx{nullptr};
    alignas(64) std::atomic<int> done{0};
    alignas(64) std::atomic<int> sleepers{0};
    std::atomic<bool> stop{false};
    std::mutex m;
    std::condition_variable cv;
    std::mutex error_m;
    std::exception_ptr error;
    std::vector<std::thread> threads;
    uint32_t gen = 0;   // the caller's job count
    int claimed = 0;    // units of the running job the caller claimed inside its own (claim())

    explicit Pool(int helpers) {
        for (int h = 1; h <= helpers; ++h) {
            try {
                threads.emplace_back([this, h] { serve(h); });
            } catch (const std::system_error&) {   // fewer helpers: the caller claims their units
                break;
            }
        }
    }

    ~Pool() {
        {
            std::lock_guard<std::mutex> lock(m);
            stop.store(true);
        }
        cv.notify_all();
        for (auto& t : threads) t.join();
    }

    void run(int units, Fn f, void* c) {
        fn.store(f, std::memory_order_relaxed);
        ctx.store(c, std::memory_order_relaxed);
        done.store(0, std::memory_order_relaxed);
        error = nullptr;
        claimed = 0;
        const uint32_t g = ++gen;
        state.store(uint64_t(g) << 32 | uint64_t(units) << 16 | 1);   // unit 0 claimed; seq_cst: see wait()
        if (sleepers.load() > 0) {
            std::lock_guard<std::mutex> lock(m);
            cv.notify_all();
        }
        call(0, 0);
        const int helpers_units = units - 1 - claimed - work(g, 0);   // `done` counts the helpers' units only
        wait_for(done, helpers_units);
        if (error) std::rethrow_exception(error);
    }

    // On the caller, inside job gen: unit `unit` if it is the next unclaimed one.
    bool claim(int unit) {
        uint64_t s = state.load(std::memory_order_acquire);
        while (gen_of(s) == gen && front_of(s) == unit && unit < end_of(s)) {
            if (state.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel)) {
                ++claimed;
                return true;
            }
        }
        return false;
    }

    // Claim and run units of job g until none is left; returns how many it ran.
    int work(uint32_t g, int slot) {
        int ran = 0;
        uint64_t s = state.load(std::memory_order_acquire);
        while (gen_of(s) == g && front_of(s) < end_of(s)) {
            const bool from_end = slot > 0;
            if (!state.compare_exchange_weak(s, from_end ? s - ONE_FROM_END : s + 1, std::memory_order_acq_rel))
                continue;
            call(from_end ? end_of(s) - 1 : front_of(s), slot);
            ++ran;
            s = state.load(std::memory_order_acquire);
        }
        return ran;
    }

    // Unit `unit` on `slot`; a helper's (slot > 0) is counted in `done` once it has finished.
    void call(int unit, int slot) {
        try {
            fn.load(std::memory_order_relaxed)(ctx.load(std::memory_order_relaxed), unit, slot);
        } catch (...) {
            std::lock_guard<std::mutex> lock(error_m);
            if (!error) error = std::current_exception();
        }
        if (slot > 0) done.fetch_add(1, std::memory_order_release);
    }

    void serve(int slot) {
        for (uint32_t seen = 0;;) {
            const uint32_t g = wait(seen);
            if (stop.load()) return;
            work(g, slot);
            seen = g;
        }
    }

    // The generation of the next job after `seen`: spin for SPIN, then sleep.
    uint32_t wait(uint32_t seen) {
        const auto start = std::chrono::steady_clock::now();
        for (int i = 1;; ++i) {
            const uint32_t g = gen_of(state.load(std::memory_order_acquire));
            if (g != seen || stop.load(std::memory_order_relaxed)) return g;
            pause();
            if (i % 64 == 0 && std::chrono::steady_clock::now() - start > SPIN) break;
        }
        std::unique_lock<std::mutex> lock(m);
        sleepers.fetch_add(1);   // seq_cst with run()'s state store and sleepers load: no lost wake-up
        cv.wait(lock, [&] { return stop.load() || gen_of(state.load()) != seen; });
        sleepers.fetch_sub(1);
        return gen_of(state.load(std::memory_order_acquire));
    }
};

Workers::Workers(int slots) : slots_(slots) {}

Workers::~Workers() { delete pool_; }

void Workers::run_units(int units, void (*fn)(void*, int, int), void* ctx) {
    if (units > MAX_UNITS) throw std::length_error("Workers::run: too many units");
    if (!pool_) pool_ = new Pool(slots_ - 1);
    pool_->run(units, fn, ctx);
}

void spin_until(const std::atomic<uint64_t>& v, uint64_t target) { wait_for(v, target); }

bool Workers::claim(int unit) { return pool_ && pool_->claim(unit); }

void Workers::forget_helpers() { pool_ = nullptr; }

}  // namespace lenet::cblas
