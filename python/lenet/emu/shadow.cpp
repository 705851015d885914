// shadow.cpp: every load and store of a kernel, checked. g++ -fsanitize=thread calls
// __tsan_readN/__tsan_writeN before each access the compiler keeps; these hooks (libtsan is never
// linked) check, in this order:
//   alignment   N-byte accesses naturally aligned; in shared memory also within the variable's
//               alignment on the GPU (nvcc's PTX .align), which x86's over-alignment would hide
//   bounds      inside a device allocation, the resident block's shared memory, a sibling's
//               shared memory reached through DSMEM, or the thread's own stack; else the launch ends.
//               In shared memory also inside a __shared__ variable (not in a red zone: cuemu.h)
// Host code (instrumented, outside launches) touching pinned memory a queued copy will still
// write is a `sync` report (cuemu_host_pending).
//   initialised reads of device memory never written by host or kernel, or of shared memory this
//               block instance never wrote
//   races       under CUDA's ordering: two accesses of one launch, one a write, are ordered only if
//               made by the same thread, by one block with a __syncthreads (or cluster barrier)
//               between them, or by one cluster with a cluster barrier between them
// A granule's accesses since its last write are summarised by their latest cluster epoch, block
// epoch and thread (Access): enough to decide that rule exactly, since epochs only grow.
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "runtime.h"

namespace cuemu {
namespace {

// the access summary `a` is ordered before the current access `x` (same stamp)
inline bool ordered(const Who& a, const Who& x) {
    if (a.cluster != x.cluster) return false;           // another cluster, or MANY
    if (a.cep < x.cep) return true;
    if (a.block != x.block) return false;
    if (a.bep < x.bep) return true;
    return a.thread == x.thread;
}

inline bool same(const Who& a, const Who& x) {
    return a.thread == x.thread && a.bep == x.bep && a.block == x.block && a.cep == x.cep && a.cluster == x.cluster;
}

// add the current access x to the summary a (of the same stamp; epochs only grow)
inline void add(Access& a, const Who& x, uintptr_t pc) {
    if (a.who.cluster != x.cluster) a.who.cluster = MANY;
    else if (x.cep > a.who.cep) a.who = x;
    else if (a.who.block != x.block) a.who.block = MANY;
    else if (x.bep > a.who.bep) a.who.bep = x.bep, a.who.thread = x.thread;
    else if (a.who.thread != x.thread) a.who.thread = MANY;
    a.pc = pc;
}

// the allocations found last, newest first: a kernel's accesses alternate between a few buffers
constexpr int RECENT = 4;
const Alloc* recent[RECENT] = {};

inline const Alloc* recently_found(uintptr_t a, size_t size) {
    for (const Alloc* al : recent)
        if (al && a >= uintptr_t(al->lo) && a + size <= uintptr_t(al->lo) + al->size) return al;
    return nullptr;
}

void remember(const Alloc* al) {
    for (int i = RECENT - 1; i > 0; --i) recent[i] = recent[i - 1];
    recent[0] = al;
}

const Alloc* find(uintptr_t a, size_t size) {
    auto it = allocs.upper_bound(a);
    if (it == allocs.begin()) return nullptr;
    --it;
    const Alloc& al = it->second;
    return a + size <= uintptr_t(al.lo) + al.size ? &al : nullptr;
}

// --- reports (out of line: the checks above stay small) -------------------------------------------
std::string by(const Who& a) {
    if (a.cluster == MANY || a.block == MANY) return "threads of several blocks";
    if (a.thread == MANY) return "several threads of block " + std::to_string(a.block);
    return "block " + std::to_string(a.block) + " thread " + std::to_string(a.thread);
}

// what an address is: "device buffer 0x... + 12 (of 3136 bytes)", "shared p1 + 40", ...
std::string describe(uintptr_t a, const Block* owner) {
    if (owner != nullptr && owner != cur.block)
        return "the shared memory of cluster rank " + std::to_string(owner->rank) + " + " +
               std::to_string((a - uintptr_t(cur.saved_lo)) % cur.shared_size);
    if (owner != nullptr) {
        size_t offset = a - uintptr_t(cur.shared_lo);
        if (cur.vars)
            for (const SharedVar& v : *cur.vars)
                if (offset >= v.offset && offset < v.offset + v.size)
                    return "shared " + v.name + " + " + std::to_string(offset - v.offset);
        return "shared memory + " + std::to_string(offset);
    }
    const Alloc* al = find(a, 1);
    return (al->name.empty() ? "device buffer " + hex(uintptr_t(al->lo)) : "argument " + al->name) + " + " +
           std::to_string(a - uintptr_t(al->lo)) + " (of " + std::to_string(al->size) + " bytes)";
}

[[gnu::cold, gnu::noinline]] void uninitialised(uintptr_t a, const Block* owner, uintptr_t pc) {
    if (known(UNINIT, pc, 0)) return;
    report(UNINIT, "read of " + describe(a, owner) + ", never written" + (owner ? " by its block" : "") + ", at @1 by " +
           who(cur.fiber), pc, 0, false);
}

[[gnu::cold, gnu::noinline]] void race(uintptr_t a, const Block* owner, bool write, const Access& before,
                                       bool before_write, uintptr_t pc) {
    if (known(RACE, pc, before.pc)) return;
    report(RACE, std::string(write ? "write" : "read") + " of " + describe(a, owner) + " at @1 by " + who(cur.fiber) +
           " races with the " + (before_write ? "write" : "read") + " at @2 by " + by(before.who) +
           " (no barrier between them)", pc, before.pc, false);
}

[[gnu::cold, gnu::noinline]] void misaligned(uintptr_t a, size_t size, bool write, uintptr_t pc, const SharedVar* v) {
    std::string detail = v ? " (shared " + v->name + " + " + std::to_string(a - uintptr_t(cur.shared_lo) - v->offset) +
                             ", which nvcc aligns to " + std::to_string(v->align) + " bytes only)" : "";
    report(MISALIGNED, std::to_string(size) + "-byte " + (write ? "store to " : "load from ") + hex(a) + detail +
           " at @1 by " + who(cur.fiber), pc, 0, true);
}

[[gnu::cold, gnu::noinline]] void out_of_bounds(uintptr_t a, size_t size, bool write, uintptr_t pc) {
    auto what = [](const Alloc& al) {
        return al.name.empty() ? "the " + std::to_string(al.size) + "-byte device buffer at " + hex(uintptr_t(al.lo))
                               : "argument " + al.name + " (" + std::to_string(al.size) + " bytes)";
    };
    std::string near;
    auto it = allocs.upper_bound(a);
    bool guarded = it != allocs.end() && !it->second.name.empty() && it->first - a <= ARG_GUARD;   // before an argument
    if (it != allocs.begin() && !guarded) {
        const Alloc& al = std::prev(it)->second;
        near = "; " + std::to_string(a - uintptr_t(al.lo) - al.size) + " bytes past the end of " + what(al);
    } else if (it != allocs.end()) {
        near = "; " + std::to_string(it->first - a) + " bytes before " + what(it->second);
    }
    report(OOB, std::to_string(size) + "-byte " + (write ? "store to " : "load from ") + hex(a) +
           " outside every device buffer, the block's shared memory and the thread's stack" + near + ", at @1 by " +
           who(cur.fiber), pc, 0, true);
}

// an access to shared memory outside every __shared__ variable: in the red zone after one (cuemu.h)
[[gnu::cold, gnu::noinline]] void outside_variables(size_t offset, size_t size, bool write, uintptr_t pc) {
    if (known(OOB, pc, 0)) return;
    const SharedVar* before = nullptr;
    for (const SharedVar& v : *cur.vars)
        if (v.offset + v.size <= offset && (!before || v.offset > before->offset)) before = &v;
    std::string what = before ? std::to_string(offset - before->offset - before->size) + " bytes past the end of shared " +
                                before->name + " (" + std::to_string(before->size) + " bytes)"
                              : "before the first __shared__ variable";
    report(OOB, std::to_string(size) + "-byte " + (write ? "store to " : "load from ") + "shared memory " + what +
           ", outside every __shared__ variable, at @1 by " + who(cur.fiber), pc, 0, false);
}

inline bool in_a_variable(size_t offset, size_t size) {
    return !cur.var_at || (cur.var_at[offset / GRANULE] >= 0 && cur.var_at[(offset + size - 1) / GRANULE] >= 0);
}

[[gnu::cold, gnu::noinline]] void dead_sibling(uintptr_t a, const Block* sibling, uintptr_t pc) {
    if (sibling == cur.block)
        return report(OOB, "access to " + hex(a) + " in the emulator's own shared-memory storage at @1 by " +
                      who(cur.fiber), pc, 0, true);
    report(DSMEM, "access to the shared memory of cluster rank " + std::to_string(sibling->rank) +
           ", which has exited, at @1 by " + who(cur.fiber), pc, 0, true);
}

// in shared memory, the GPU guarantees each variable only its own (PTX) alignment
void check_shared_alignment(size_t offset, size_t size, bool write, uintptr_t pc) {
    for (const SharedVar& v : *cur.vars)
        if (offset >= v.offset && offset < v.offset + v.size) {
            if (v.align < size || (offset - v.offset) % size != 0)
                misaligned(uintptr_t(cur.shared_lo) + offset, size, write, pc, &v);
            return;
        }
}

// --- the check of one access ---------------------------------------------------------------------
inline void check(Cell& c, uint32_t stamp, bool write, uintptr_t a, const Block* owner, uintptr_t pc) {
    const Who& x = cur.who;
    bool written = c.w.stamp == stamp;              // by this launch (device) or this block (shared)
    if (!write) {
        if (c.r.stamp == stamp && same(c.r.who, x)) return;     // read before, in this epoch
        if (owner ? !written : c.w.stamp == 0) uninitialised(a, owner, pc);
        if (written && !ordered(c.w.who, x)) race(a, owner, false, c.w, true, pc);
        if (c.r.stamp != stamp) c.r = {pc, stamp, x};
        else add(c.r, x, pc);
        return;
    }
    if (written && !ordered(c.w.who, x)) race(a, owner, true, c.w, true, pc);
    if (c.r.stamp == stamp && !ordered(c.r.who, x)) race(a, owner, true, c.r, false, pc);
    c.w = {pc, stamp, x};
    c.r.stamp = 0;
}

// host code (instrumented, outside any launch) touching memory that queued work will still write
[[gnu::cold, gnu::noinline]] void host_before_sync(uintptr_t a, bool write, uintptr_t pc) {
    auto it = host_pending.upper_bound(a);
    if (it == host_pending.begin() || a >= std::prev(it)->first + std::prev(it)->second || known(SYNC, pc, 0)) return;
    --it;
    report(SYNC, std::string("host ") + (write ? "write to" : "read of") + " pinned memory " + hex(it->first) + " + " +
           std::to_string(a - it->first) + " (of " + std::to_string(it->second) + " bytes) at @1 before the stream's "
           "work on it finished: a cudaMemcpyAsync into it is still queued (synchronise the stream first)", pc, 0, false);
}

void access(uintptr_t a, size_t size, bool write, uintptr_t pc) {
    if (!cur.running && !host_pending.empty()) return host_before_sync(a, write, pc);
    if (!cur.running || cur.fiber == nullptr) return;
    if (a & (size - 1)) return misaligned(a, size, write, pc, nullptr);
    if (a >= uintptr_t(cur.stack_lo) && a + size <= uintptr_t(cur.stack_hi)) return;
    Cell* cells;
    uint32_t stamp;
    const Block* owner = nullptr;
    if (a >= uintptr_t(cur.shared_lo) && a + size <= uintptr_t(cur.shared_lo) + cur.shared_size) {
        size_t offset = a - uintptr_t(cur.shared_lo);
        if (!in_a_variable(offset, size)) return outside_variables(offset, size, write, pc);
        if (size > cur.min_var_align) check_shared_alignment(offset, size, write, pc);
        owner = cur.block;
        cells = owner->shadow + offset / GRANULE;
        stamp = owner->stamp;
    } else if (const Alloc* al = recently_found(a, size)) {
        cells = al->shadow + (a - uintptr_t(al->lo)) / GRANULE;
        stamp = cur.launch;
    } else if (a >= uintptr_t(cur.saved_lo) && a + size <= uintptr_t(cur.saved_hi)) {
        size_t at = a - uintptr_t(cur.saved_lo), rank = at / cur.shared_size, offset = at % cur.shared_size;
        Block* sibling = &cur.cluster->blocks[rank];
        if (sibling == cur.block || offset + size > cur.shared_size || sibling->exited == cur.threads)
            return dead_sibling(a, sibling, pc);
        if (!in_a_variable(offset, size)) return outside_variables(offset, size, write, pc);
        if (size > cur.min_var_align) check_shared_alignment(offset, size, write, pc);
        dsmem_accessed(sibling, pc);
        owner = sibling;
        cells = sibling->shadow + offset / GRANULE;
        stamp = sibling->stamp;
    } else if (const Alloc* al = find(a, size)) {
        remember(al);
        cells = al->shadow + (a - uintptr_t(al->lo)) / GRANULE;
        stamp = cur.launch;
    } else {
        return out_of_bounds(a, size, write, pc);
    }
    cur.traffic[(owner ? 2 : 0) + write] += size;
    if (cur.aborted) return;
    size_t count = (a + size - 1) / GRANULE - a / GRANULE + 1;
    for (size_t i = 0; i < count && !cur.aborted; ++i) check(cells[i], stamp, write, a, owner, pc);
}

}  // namespace

Cell* shadow_map(size_t bytes, size_t* mapped) {
    *mapped = ((bytes + GRANULE - 1) / GRANULE * sizeof(Cell) + 4095) / 4096 * 4096;
    void* p = mmap(nullptr, *mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) std::abort();
    return static_cast<Cell*>(p);          // zero: never written, never read
}

void forget(const Alloc* a) {
    for (const Alloc*& al : recent)
        if (al == a) al = nullptr;
}

void shadow_unmap(Cell* cells, size_t mapped) {
    for (const Alloc*& al : recent)
        if (al && al->shadow == cells) al = nullptr;
    munmap(cells, mapped);
}

void mark_host_write(const Alloc& a, size_t offset, size_t bytes, uint32_t stamp) {
    for (size_t g = offset / GRANULE; g < (offset + bytes + GRANULE - 1) / GRANULE; ++g) {
        a.shadow[g].w = {0, stamp, Who{}};
        a.shadow[g].r.stamp = 0;
    }
}

size_t first_unwritten(const Alloc& a, size_t offset, size_t bytes) {
    for (size_t at = offset; at < offset + bytes; at = (at / GRANULE + 1) * GRANULE)
        if (a.shadow[at / GRANULE].w.stamp == 0) return at - offset;
    return bytes;
}

const Alloc* alloc_of(const void* p, size_t bytes) { return find(uintptr_t(p), bytes); }

}  // namespace cuemu

// the hooks g++ -fsanitize=thread emits (the return address is the instrumented access)
#define CUEMU_HOOK(n)                                                                                       \
    extern "C" void __tsan_read##n(void* p) { cuemu::access(uintptr_t(p), n, false, uintptr_t(__builtin_return_address(0))); } \
    extern "C" void __tsan_write##n(void* p) { cuemu::access(uintptr_t(p), n, true, uintptr_t(__builtin_return_address(0))); } \
    extern "C" void __tsan_unaligned_read##n(void* p) { cuemu::access(uintptr_t(p), n, false, uintptr_t(__builtin_return_address(0))); } \
    extern "C" void __tsan_unaligned_write##n(void* p) { cuemu::access(uintptr_t(p), n, true, uintptr_t(__builtin_return_address(0))); }
CUEMU_HOOK(1)
CUEMU_HOOK(2)
CUEMU_HOOK(4)
CUEMU_HOOK(8)
CUEMU_HOOK(16)
// block copies (memcpy, large structs): each granule checked, no alignment asked
static void access_range(const void* p, size_t size, bool write, uintptr_t pc) {
    uintptr_t a = uintptr_t(p), end = a + size;
    while (a < end && !cuemu::cur.aborted) {
        size_t n = std::min<uintptr_t>(end, (a / cuemu::GRANULE + 1) * cuemu::GRANULE) - a;
        cuemu::access(a, n == 4 ? 4 : 1, write, pc);
        a += n == 4 ? 4 : 1;
    }
}
extern "C" void __tsan_read_range(void* p, size_t size) { access_range(p, size, false, uintptr_t(__builtin_return_address(0))); }
extern "C" void __tsan_write_range(void* p, size_t size) { access_range(p, size, true, uintptr_t(__builtin_return_address(0))); }
extern "C" void cuemu_vector_access(const void* p, size_t bytes, int write) {
    cuemu::access(uintptr_t(p), bytes, write != 0, uintptr_t(__builtin_return_address(0)));
}
extern "C" void __tsan_init() {}
extern "C" void __tsan_vptr_update(void**, void*) {}   // host C++ in a unit like cudnn_net.cu: never a kernel
extern "C" void __tsan_func_entry(void*) {}
extern "C" void __tsan_func_exit() {}
