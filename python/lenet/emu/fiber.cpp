// fiber.cpp: one fiber per CUDA thread. A fiber is a 64 KB mmap'd stack (a guard page below it)
// and a saved stack pointer; switching saves the callee-saved registers on the old stack and
// pops them from the new one (x86-64 System V; about 10x faster than ucontext, which makes a
// sigprocmask system call per switch). Stacks are kept and reused from launch to launch.
#include <sys/mman.h>

#include <cstdlib>
#include <vector>

#include "runtime.h"

#if !defined(__x86_64__)
#error "the emulator's fiber switch is written for x86-64 (System V ABI)"
#endif

// cuemu_switch(save, to): push the callee-saved registers, store rsp in *save, load `to`, pop, ret
asm(R"(
    .text
    .globl cuemu_switch
    .hidden cuemu_switch
    .type cuemu_switch, @function
cuemu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size cuemu_switch, .-cuemu_switch
)");
extern "C" void cuemu_switch(void** save, void* to);

namespace cuemu {
namespace {

constexpr size_t STACK = 64 << 10, GUARD = 4 << 10;
std::vector<Fiber> pool;       // contiguous; grows only between launches
void* scheduler_sp = nullptr;

}  // namespace

void fibers_reserve(size_t count) {
    while (pool.size() < count) {
        char* base = static_cast<char*>(mmap(nullptr, STACK + GUARD, PROT_READ | PROT_WRITE,
                                             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
        if (base == MAP_FAILED) std::abort();
        mprotect(base, GUARD, PROT_NONE);             // a stack overflow faults instead of corrupting
        Fiber f;
        f.stack_lo = base + GUARD;
        f.stack_hi = base + GUARD + STACK;
        pool.push_back(f);
    }
}

Fiber* fiber_at(size_t i) { return &pool[i]; }

void fiber_start(Fiber* f, void (*entry)()) {
    // as if `entry` had been called: the return-address slot at 16n - 8, then 6 saved registers
    void** sp = reinterpret_cast<void**>(f->stack_hi) - 2;
    sp[1] = nullptr;                                  // entry's return address: never used
    sp[0] = reinterpret_cast<void*>(entry);
    sp -= 6;
    for (int i = 0; i < 6; ++i) sp[i] = nullptr;
    f->sp = sp;
    f->state = State::RUN;
}

void fiber_run(Fiber* f) {
    cur.fiber = f;
    cur.block = f->block;
    cur.stack_lo = f->stack_lo;
    cur.stack_hi = f->stack_hi;
    refresh_who();
    cuemu_switch(&scheduler_sp, f->sp);
    cur.fiber = nullptr;
}

void fiber_yield() { cuemu_switch(&cur.fiber->sp, scheduler_sp); }

void fiber_exit() {
    void* discard;
    cuemu_switch(&discard, scheduler_sp);
    std::abort();                                     // an exited fiber is never resumed
}

}  // namespace cuemu
