// cblas backend, internal: the one worker model for single images and batches (cblas_workers.cpp).
// A net's work is cut into units; run(units, f) hands them out to the calling thread and the
// net's persistent helper threads, whoever asks first, one at a time: to the calling thread from
// the first unit up, to helpers from the last down (two threads then take the same halves of
// every job of a size, and find there what the job before left in their caches). The calling
// thread always claims units too, so a helper that is asleep or descheduled never delays the
// result beyond the unit it already took. Helpers spin SPIN after each job, then sleep (an idle
// net burns no core).
// Not thread-safe: one run() at a time per Workers (the net's mutex serialises its calls).
#pragma once
#include <atomic>
#include <cstdint>
#include <type_traits>

namespace lenet::cblas {

class Workers {
public:
    explicit Workers(int slots);   // slots: threads, the calling one included; helpers start on first use
    ~Workers();
    Workers(const Workers&) = delete;
    Workers& operator=(const Workers&) = delete;

    int slots() const { return slots_; }

    // f(unit, slot) for every unit in [0, units), each exactly once, on the calling thread (slot 0)
    // or a helper (slots 1 .. slots() - 1); returns when all have run; an exception thrown by any
    // of them is rethrown here, on the calling thread, after all have finished.
    template <class F>
    void run(int units, F&& f) {
        if (units <= 1 || slots_ == 1) {
            for (int u = 0; u < units; ++u) f(u, 0);
            return;
        }
        using Fn = std::remove_reference_t<F>;
        run_units(units, [](void* c, int u, int s) { (*static_cast<Fn*>(c))(u, s); }, &f);
    }

    // Inside run() of more than one unit, on the calling thread: claims unit `unit` of the job if
    // no thread has yet and it is the caller's next (the caller claims from the first unit up);
    // the caller then runs it itself, within its own unit, and run() does not call f for it.
    bool claim(int unit);

    // In the child of fork(): the helper threads did not survive it; forget them (they are never
    // joined: their memory is left behind) and start new ones on the next run().
    void forget_helpers();

private:
    struct Pool;
    void run_units(int units, void (*fn)(void*, int, int), void* ctx);

    const int slots_;
    Pool* pool_ = nullptr;
};

// Waits until v >= target (acquire), with the pauses and yields of run()'s own wait.
void spin_until(const std::atomic<uint64_t>& v, uint64_t target);

}  // namespace lenet::cblas
