// runtime.cpp: launches on the emulator of CUDA semantics (the C interface declared in cuemu.h).
// A launch runs cluster by cluster (a kernel without __cluster_dims__ has clusters of one block);
// the blocks of a cluster are live together, each CUDA thread a fiber (fiber.cpp). The module's
// __shared__ variables are statics in its "cuemu_shared" section, holding the shared memory of
// the block that is running (the resident block); the others' are kept in save areas, which is
// also where DSMEM reaches them. Strictness, beyond a GPU's:
//   __syncthreads   every thread of the block at the same call site; none may have exited
//   cluster barrier every thread of the cluster at the same call site; none may have exited
//   shuffles        every lane of the mask at the same call site with the same mask; lanes must
//                   exist (full masks in partial warps are rejected) and read only lanes in the mask
//   DSMEM           no access to an exited block; no block exits in the cluster epoch in which a
//                   sibling accessed its shared memory (a missing final cluster barrier)
//   launch limits   as on sm_90: block <= 1024 threads (x, y <= 1024, z <= 64), grid y, z <= 65535,
//                   static shared memory <= 48 KB per block, cluster <= 8 blocks dividing the grid;
//                   where nvcc told them: threads <= __launch_bounds__, registers per block <= 65536
// A deadlock (threads waiting at different barriers) is reported, never hung on.
#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

#include "cuemu_api.h"
#include "runtime.h"

extern "C" {
struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x, y, z; };
struct cuemu_shared_var { size_t offset, size, align; const char* name; };
void cuemu_set_shared_vars(const char* section, size_t bytes, size_t n, const cuemu_shared_var* vars);
}

namespace cuemu {

Current cur;
std::map<uintptr_t, Alloc> allocs;
std::map<uintptr_t, size_t> host_pending;

namespace {

constexpr size_t MAX_SHARED = 48 << 10, MAX_CLUSTER = 8, MAX_REPORTS = 64, MAX_REGISTERS = 65536;
constexpr uint8_t POISON = 0xff;       // NaN as float32, -1 as int32

struct Report { Kind kind; std::string text; uintptr_t pc, pc2; size_t count; };
const char* KIND[] = {"race", "out-of-bounds", "misaligned", "uninitialised", "sync", "dsmem", "launch"};

std::recursive_mutex lock;
std::vector<Report> reports;
size_t dropped = 0;
size_t made = 0;                       // reports made, repeats included: what a launch returns
uint32_t counter = 1;                  // launch ids and block instances; host writes carry the last
const cuemu_launch_desc* running = nullptr;
std::map<const void*, std::vector<SharedVar>> module_vars;   // by section start
std::map<const void*, std::vector<int16_t>> module_var_at;   // by section start: Current::var_at
std::map<const void*, cuemu_dim3> cluster_dims_cache;

}  // namespace

std::string hex(uintptr_t v) {
    char s[32];
    std::snprintf(s, sizeof s, "0x%zx", size_t(v));
    return s;
}

namespace {

std::string dims(uint32_t x, uint32_t y, uint32_t z) {
    return "(" + std::to_string(x) + "," + std::to_string(y) + "," + std::to_string(z) + ")";
}

void abort_fiber() {
    cur.aborted = true;
    if (cur.fiber) fiber_exit();
}

// The ELF file of the shared object holding `code` (empty if unreadable), and its load base.
std::vector<char> elf_of(const void* code, uintptr_t* base) {
    Dl_info info;
    if (!dladdr(code, &info) || !info.dli_fname) return {};
    std::ifstream file(info.dli_fname, std::ios::binary);
    std::vector<char> elf((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    if (elf.size() < sizeof(Elf64_Ehdr) || std::memcmp(elf.data(), ELFMAG, SELFMAG) != 0) return {};
    *base = uintptr_t(info.dli_fbase);
    return elf;
}

// A module whose shared variables nobody registered (a C++ unit like cudnn_net.cu): their extents
// from its symbol table, each named by the last part of its demangled name; cuemu.h's red zones
// are in no variable. Alignments unknown (16: not checked).
void discover_shared_vars(const cuemu_launch_desc& d, size_t section, std::vector<SharedVar>& vars) {
    uintptr_t base = 0;
    std::vector<char> elf = elf_of(d.kernel, &base);
    if (elf.empty()) return;
    auto* eh = reinterpret_cast<const Elf64_Ehdr*>(elf.data());
    auto* sh = reinterpret_cast<const Elf64_Shdr*>(elf.data() + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; ++i) {
        if (sh[i].sh_type != SHT_SYMTAB) continue;
        auto* sym = reinterpret_cast<const Elf64_Sym*>(elf.data() + sh[i].sh_offset);
        const char* names = elf.data() + sh[sh[i].sh_link].sh_offset;
        for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
            uintptr_t at = base + sym[k].st_value - uintptr_t(d.shared_lo);
            std::string name = names + sym[k].st_name;
            if (ELF64_ST_TYPE(sym[k].st_info) != STT_OBJECT || at >= section || name.find("cuemu_redzone_") != std::string::npos)
                continue;
            int ok = 0;
            char* readable = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &ok);
            if (ok == 0) name = readable;
            std::free(readable);
            vars.push_back({at, sym[k].st_size, 16, name.substr(name.rfind(':') == std::string::npos ? 0 : name.rfind(':') + 1)});
        }
    }
}

// --- cluster shape: a __cluster_dims__ kernel lives in section "cuemu_cluster_X_Y_Z" (cuemu.h)
cuemu_dim3 read_cluster_dims(const void* kernel) {
    cuemu_dim3 one{1, 1, 1};
    uintptr_t base = 0;
    std::vector<char> elf = elf_of(kernel, &base);
    if (elf.empty()) return one;
    auto* eh = reinterpret_cast<const Elf64_Ehdr*>(elf.data());
    auto* sh = reinterpret_cast<const Elf64_Shdr*>(elf.data() + eh->e_shoff);
    const char* names = elf.data() + sh[eh->e_shstrndx].sh_offset;
    uintptr_t at = uintptr_t(kernel) - base;
    for (int i = 0; i < eh->e_shnum; ++i) {
        if (at < sh[i].sh_addr || at >= sh[i].sh_addr + sh[i].sh_size) continue;
        cuemu_dim3 d;
        if (std::sscanf(names + sh[i].sh_name, "cuemu_cluster_%u_%u_%u", &d.x, &d.y, &d.z) == 3) return d;
    }
    return one;
}

cuemu_dim3 cluster_dims(const void* kernel) {
    auto it = cluster_dims_cache.find(kernel);
    if (it == cluster_dims_cache.end()) it = cluster_dims_cache.emplace(kernel, read_cluster_dims(kernel)).first;
    return it->second;
}

// why sm_90 would refuse this launch, or ""
std::string refusal(const cuemu_launch_desc& d) {
    const cuemu_dim3 c = cluster_dims(d.kernel), &g = d.grid, &b = d.block;
    const size_t shared = d.static_shared ? d.static_shared : size_t(d.shared_hi - d.shared_lo);
    if (!g.x || !g.y || !g.z || !b.x || !b.y || !b.z) return "a grid or block dimension is 0";
    if (size_t(b.x) * b.y * b.z > 1024 || b.x > 1024 || b.y > 1024 || b.z > 64)
        return "block " + dims(b.x, b.y, b.z) + " exceeds sm_90's limits (1024 threads; x, y <= 1024, z <= 64)";
    if (g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535) return "grid " + dims(g.x, g.y, g.z) + " exceeds sm_90's limits";
    if (shared > MAX_SHARED)
        return std::to_string(shared) + " bytes of static shared memory per block exceed sm_90's 48 KB";
    const size_t threads = size_t(b.x) * b.y * b.z;
    if (d.max_threads && threads > d.max_threads)
        return "block " + dims(b.x, b.y, b.z) + " has " + std::to_string(threads) + " threads, more than the kernel's "
               "__launch_bounds__ of " + std::to_string(d.max_threads) + " (.maxntid in nvcc's PTX)";
    // registers are allocated per warp in units of 256 (8 per thread); a block's warps share one SM
    const size_t per_warp = (size_t(d.registers) * 32 + 255) / 256 * 256, warps = (threads + 31) / 32;
    if (per_warp * warps > MAX_REGISTERS)
        return std::to_string(warps) + " warps x " + std::to_string(d.registers) + " registers per thread (nvcc's resource "
               "report) need " + std::to_string(per_warp * warps) + " registers, more than an sm_90 SM's 65536" +
               (size_t(c.x) * c.y * c.z > 1 ? ": no SM can hold one block of the cluster" : "");
    if (size_t(c.x) * c.y * c.z > MAX_CLUSTER)
        return "cluster " + dims(c.x, c.y, c.z) + " exceeds the portable cluster size of 8 blocks";
    if (g.x % c.x || g.y % c.y || g.z % c.z)
        return "grid " + dims(g.x, g.y, g.z) + " is not a multiple of the cluster " + dims(c.x, c.y, c.z);
    return "";
}

// --- one cluster --------------------------------------------------------------------------------
void fiber_main() {
    running->thunk(running->kernel, running->args);
    Fiber* f = cur.fiber;
    Block* b = f->block;
    Cluster* c = b->cluster;
    f->state = State::DONE;
    ++b->exited;
    --c->live;
    if (b->bar_waiting)
        report(SYNC, who(f) + " exits while " + std::to_string(b->bar_waiting) +
               " threads of its block wait at the __syncthreads at " + b->bar_site.str(), 0, 0, true);
    if (c->waiting)
        report(SYNC, who(f) + " exits while " + std::to_string(c->waiting) +
               " threads of its cluster wait at the cluster barrier at " + c->site.str(), 0, 0, true);
    Warp& w = b->warps[f->linear / 32];
    w.exited |= 1u << (f->linear % 32);
    if (w.arrived && (w.mask >> (f->linear % 32) & 1))
        report(SYNC, who(f) + " exits while lanes of its warp wait for it at the shuffle at " + w.site.str(), 0, 0, true);
    if (b->exited == cur.threads && b->remote_cep == c->cep)
        report(DSMEM, "cluster rank " + std::to_string(b->rank) + " exits in cluster epoch " + std::to_string(c->cep) +
               " while rank " + std::to_string(b->remote_by) + " accessed its shared memory in the same epoch, at @1 "
               "(no cluster barrier keeps it alive)", b->remote_pc, 0, false);
    fiber_exit();
}

void make_resident(Block* b) {
    if (cur.resident == b) return;
    if (cur.resident) std::memcpy(cur.resident->saved, cur.shared_lo, cur.shared_size);
    std::memcpy(cur.shared_lo, b->saved, cur.shared_size);
    cur.resident = b;
}

void run_block(Block* b) {
    while (b->head < b->runnable.size() && !cur.aborted) {
        Fiber* f = &b->fibers[b->runnable[b->head++]];
        if (f->state == State::RUN) fiber_run(f);
    }
    if (b->head == b->runnable.size()) b->runnable.clear(), b->head = 0;
}

std::string deadlock(const Cluster& c) {
    std::string text = "deadlock:";
    for (const Block& b : c.blocks) {
        size_t at[5] = {};
        std::string shuffles;
        for (uint32_t t = 0; t < cur.threads; ++t) ++at[size_t(b.fibers[t].state)];
        for (const Warp& w : b.warps)
            if (w.arrived && shuffles.find(w.site.str()) == std::string::npos) shuffles += " " + w.site.str();
        text += " block " + std::to_string(b.linear) + ": " + std::to_string(at[size_t(State::BAR)]) +
                " threads at the __syncthreads at " + b.bar_site.str() + ", " + std::to_string(at[size_t(State::SHFL)]) +
                " at shuffles at" + shuffles + ", " + std::to_string(at[size_t(State::CBAR)]) +
                " at the cluster barrier at " + c.site.str() + ", " + std::to_string(at[size_t(State::DONE)]) + " exited;";
    }
    return text;
}

void run_cluster(Cluster& c, const cuemu_dim3& cd, uint32_t cx, uint32_t cy, uint32_t cz, Fiber* pool) {
    size_t k = 0;
    for (Block& b : c.blocks) {
        uint32_t r = uint32_t(k++);
        b.x = cx * cd.x + r % cd.x, b.y = cy * cd.y + r / cd.x % cd.y, b.z = cz * cd.z + r / (cd.x * cd.y);
        b.linear = b.x + b.y * cur.gx + b.z * cur.gx * cur.gy;
        b.rank = r, b.stamp = ++counter, b.bep = 0, b.cluster = &c;
        b.fibers = pool + size_t(r) * cur.threads;
        b.runnable.resize(cur.threads);
        b.head = 0, b.bar_waiting = 0, b.exited = 0, b.remote_cep = MANY;
        b.warps.assign((cur.threads + 31) / 32, Warp{});
        for (uint32_t t = 0; t < cur.threads; ++t) {
            Fiber* f = &b.fibers[t];
            f->block = &b;
            f->linear = t, f->x = t % cur.bx, f->y = t / cur.bx % cur.by, f->z = t / (cur.bx * cur.by);
            fiber_start(f, fiber_main);
            b.runnable[t] = t;
        }
        std::memset(b.saved, POISON, cur.shared_size);
    }
    c.cep = 0, c.waiting = 0, c.live = c.threads;
    cur.resident = nullptr;
    while (c.live && !cur.aborted) {
        bool progress = false;
        for (Block& b : c.blocks) {
            if (b.head == b.runnable.size()) continue;
            make_resident(&b);
            run_block(&b);
            progress = true;
            if (cur.aborted) return;
        }
        if (!progress && c.live) report(SYNC, deadlock(c), 0, 0, true);
    }
}

// A launch's copy of one argument's extent (cuemu_arg_extent), between unowned guard zones. It
// shares the buffer's shadow, so what was written, and races, are seen through either address.
struct Window { char* parent; char* raw; char* view; size_t bytes; std::vector<char**> slots; };

// each argument with an extent inside one device buffer, granule-aligned, gets a window (one per
// range: identical ranges share it; a range overlapping another window keeps its buffer's bounds only)
std::vector<Window> open_windows(const cuemu_launch_desc& d) {
    std::vector<Window> out;
    for (size_t i = 0; i < d.n_extents; ++i) {
        const cuemu_arg_extent& e = d.extents[i];
        char** slot = static_cast<char**>(d.args[e.arg]);
        char* p = *slot;
        const Alloc* parent = alloc_of(p, e.bytes);
        if (!parent || e.bytes == 0 || (p - parent->lo) % GRANULE) continue;
        auto same = std::find_if(out.begin(), out.end(), [&](const Window& w) { return w.parent == p && w.bytes == e.bytes; });
        if (same != out.end()) {
            same->slots.push_back(slot), *slot = same->view;
            continue;
        }
        if (std::any_of(out.begin(), out.end(), [&](const Window& w) { return p < w.parent + w.bytes && w.parent < p + e.bytes; }))
            continue;
        char* raw = static_cast<char*>(std::aligned_alloc(256, ARG_GUARD + (e.bytes + 255) / 256 * 256 + ARG_GUARD));
        if (!raw) continue;
        char* view = raw + ARG_GUARD;
        std::memcpy(view, p, e.bytes);
        allocs[uintptr_t(view)] = Alloc{view, e.bytes, parent->shadow + (p - parent->lo) / GRANULE, 0, e.name ? e.name : "?"};
        *slot = view;
        out.push_back({p, raw, view, e.bytes, {slot}});
    }
    return out;
}

// the windows' bytes back into their buffers, the arguments as they were
void close_windows(const std::vector<Window>& windows) {
    for (const Window& w : windows) {
        std::memcpy(w.parent, w.view, w.bytes);
        for (char** slot : w.slots) *slot = w.parent;
        auto it = allocs.find(uintptr_t(w.view));
        forget(&it->second);
        allocs.erase(it);
        std::free(w.raw);
    }
}

}  // namespace

bool known(Kind kind, uintptr_t pc, uintptr_t pc2) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    for (Report& r : reports)
        if (r.kind == kind && r.pc == pc && r.pc2 == pc2) return ++r.count, ++made, true;
    return false;
}

void report(Kind kind, const std::string& text, uintptr_t pc, uintptr_t pc2, bool fatal) {
    {
        std::lock_guard<std::recursive_mutex> hold(lock);
        ++made;
        auto same = [&](const Report& r) { return r.kind == kind && r.pc == pc && r.pc2 == pc2; };
        auto it = std::find_if(reports.begin(), reports.end(), same);
        if (it != reports.end()) ++it->count;
        else if (reports.size() < MAX_REPORTS) reports.push_back({kind, text, pc, pc2, 1});
        else ++dropped;
    }
    if (fatal) abort_fiber();       // never returns inside a fiber: nothing may be held here
}

std::string who(const Fiber* f) {
    const Block* b = f->block;
    return "block " + dims(b->x, b->y, b->z) + " thread " + dims(f->x, f->y, f->z);
}

void refresh_who() {
    const Block* b = cur.block;
    cur.who = {b->cluster->linear, b->cluster->cep, b->linear, b->bep, cur.fiber->linear};
}

void dsmem_accessed(Block* owner, uintptr_t pc) {
    owner->remote_cep = owner->cluster->cep;
    owner->remote_pc = pc;
    owner->remote_by = cur.block->rank;
}

}  // namespace cuemu

using namespace cuemu;

extern "C" {

int cuemu_launch(const cuemu_launch_desc* d) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    size_t before = made;
    size_t section = size_t(d->shared_hi - d->shared_lo);
    cuemu_dim3 cd = cluster_dims(d->kernel);
    std::string bad = refusal(*d);
    if (!bad.empty()) {
        report(LAUNCH, "launch of the kernel at @1 refused: " + bad, uintptr_t(d->kernel) + 1, 0, false);
        return int(made - before);
    }
    std::vector<Window> windows = open_windows(*d);
    cur.bx = d->block.x, cur.by = d->block.y, cur.bz = d->block.z;
    cur.gx = d->grid.x, cur.gy = d->grid.y, cur.gz = d->grid.z;
    cur.threads = cur.bx * cur.by * cur.bz;
    size_t per_cluster = size_t(cd.x) * cd.y * cd.z;
    fibers_reserve(per_cluster * cur.threads);
    cur.shared_lo = const_cast<char*>(d->shared_lo);
    cur.shared_size = section;
    if (section && !module_vars.count(d->shared_lo)) {
        std::vector<SharedVar> found;
        discover_shared_vars(*d, section, found);
        std::vector<cuemu_shared_var> rows;
        for (const SharedVar& v : found) rows.push_back({v.offset, v.size, v.align, v.name.c_str()});
        cuemu_set_shared_vars(d->shared_lo, section, rows.size(), rows.data());
    }
    auto vars = module_vars.find(d->shared_lo);
    cur.vars = vars == module_vars.end() ? nullptr : &vars->second;
    auto var_at = module_var_at.find(d->shared_lo);
    cur.var_at = var_at == module_var_at.end() || var_at->second.size() * GRANULE < section ? nullptr : var_at->second.data();
    cur.min_var_align = 16;
    if (cur.vars)
        for (const SharedVar& v : *cur.vars) cur.min_var_align = std::min(cur.min_var_align, v.align);
    std::vector<char> saved(per_cluster * std::max<size_t>(section, 1));
    cur.saved_lo = saved.data();
    cur.saved_hi = saved.data() + saved.size();
    Cluster c;
    c.blocks.resize(per_cluster);
    c.threads = uint32_t(per_cluster * cur.threads);
    size_t cells = (section + GRANULE - 1) / GRANULE;
    std::vector<Cell> shadow(per_cluster * std::max<size_t>(cells, 1));
    for (size_t r = 0; r < per_cluster; ++r) {
        c.blocks[r].saved = saved.data() + r * section;
        c.blocks[r].shadow = shadow.data() + r * cells;
    }
    running = d;
    cur.launch = ++counter;
    cur.running = true, cur.aborted = false, cur.cluster = &c;
    uint32_t ncx = cur.gx / cd.x, ncy = cur.gy / cd.y, ncz = cur.gz / cd.z;
    for (uint32_t z = 0; z < ncz && !cur.aborted; ++z)
        for (uint32_t y = 0; y < ncy && !cur.aborted; ++y)
            for (uint32_t x = 0; x < ncx && !cur.aborted; ++x) {
                c.linear = x + y * ncx + z * ncx * ncy;
                run_cluster(c, cd, x, y, z, fiber_at(0));
            }
    cur.running = false, cur.cluster = nullptr, cur.resident = nullptr, running = nullptr;
    cur.saved_lo = cur.saved_hi = nullptr, cur.shared_lo = nullptr, cur.shared_size = 0;
    close_windows(windows);
    return int(made - before);
}

const char* cuemu_launch_refusal(const cuemu_launch_desc* d) {
    static std::string why;
    std::lock_guard<std::recursive_mutex> hold(lock);
    why = refusal(*d);
    return why.c_str();
}

uint3 cuemu_thread_idx() { const Fiber* f = cur.fiber; return f ? uint3{f->x, f->y, f->z} : uint3{0, 0, 0}; }
uint3 cuemu_block_idx() { const Block* b = cur.block; return b ? uint3{b->x, b->y, b->z} : uint3{0, 0, 0}; }
dim3 cuemu_block_dim() { return {cur.bx, cur.by, cur.bz}; }
dim3 cuemu_grid_dim() { return {cur.gx, cur.gy, cur.gz}; }
unsigned cuemu_cluster_ctarank() { return cur.block ? cur.block->rank : 0; }

// --- device memory: 256-byte aligned, poisoned with NaN bytes, uninitialised until written
void* cuemu_malloc(size_t bytes) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    size_t size = std::max<size_t>(bytes, 1);
    char* p = static_cast<char*>(std::aligned_alloc(256, (size + 255) / 256 * 256));
    if (!p) return nullptr;
    std::memset(p, POISON, size);
    Alloc a{p, size, nullptr, 0};
    a.shadow = shadow_map(size, &a.shadow_bytes);
    allocs[uintptr_t(p)] = a;
    return p;
}

void cuemu_free(void* device) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    auto it = allocs.find(uintptr_t(device));
    if (it == allocs.end()) return;
    shadow_unmap(it->second.shadow, it->second.shadow_bytes);
    std::free(it->second.lo);
    allocs.erase(it);
}

static int host_access(const void* device, size_t bytes, const char* what) {
    const Alloc* a = alloc_of(device, bytes);
    if (a) return 0;
    report(OOB, std::string(what) + " of " + std::to_string(bytes) + " bytes at " + std::to_string(uintptr_t(device)) +
           " is not inside one device buffer", 0, 0, false);
    return -1;
}

int cuemu_memcpy_htod(void* device, const void* host, size_t bytes) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    if (host_access(device, bytes, "host-to-device copy")) return -1;
    const Alloc* a = alloc_of(device, bytes);
    std::memcpy(device, host, bytes);
    mark_host_write(*a, static_cast<char*>(device) - a->lo, bytes, counter);
    return 0;
}

int cuemu_memcpy_dtoh(void* host, const void* device, size_t bytes) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    if (host_access(device, bytes, "device-to-host copy")) return -1;
    std::memcpy(host, device, bytes);
    return 0;
}

// the device buffer holding `device` (its base, and its size in *bytes), or NULL
void* cuemu_buffer_of(const void* device, size_t* bytes) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    const Alloc* a = alloc_of(device, 1);
    if (a && bytes) *bytes = a->size;
    return a ? a->lo : nullptr;
}

void cuemu_host_pending(const void* host, size_t bytes, int pending) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    const uintptr_t a = uintptr_t(host);
    if (pending) host_pending[a] = bytes;
    else for (auto it = host_pending.lower_bound(a); it != host_pending.end() && it->first < a + std::max<size_t>(bytes, 1);)
        it = host_pending.erase(it);
}

// the offset of the first byte of [device, device + bytes) never written, `bytes` if all were, or
// (size_t)-1 if the range is not inside one device buffer
size_t cuemu_first_unwritten(const void* device, size_t bytes) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    const Alloc* a = alloc_of(device, bytes);
    return a ? first_unwritten(*a, static_cast<const char*>(device) - a->lo, bytes) : size_t(-1);
}

// host code (e.g. a CPU stand-in for a library call) wrote [device, device + bytes) itself
int cuemu_mark_written(void* device, size_t bytes) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    if (host_access(device, bytes, "host write")) return -1;
    const Alloc* a = alloc_of(device, bytes);
    mark_host_write(*a, static_cast<char*>(device) - a->lo, bytes, counter);
    return 0;
}

int cuemu_memset32(void* device, uint32_t value, size_t count) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    if (host_access(device, count * 4, "memset")) return -1;
    const Alloc* a = alloc_of(device, count * 4);
    uint32_t* p = static_cast<uint32_t*>(device);
    std::fill(p, p + count, value);
    mark_host_write(*a, static_cast<char*>(device) - a->lo, count * 4, counter);
    return 0;
}

// a module's __shared__ variables: extents (what lies between them is red zone) and alignments on the
// GPU (nvcc's PTX .align), by offset in its section of `bytes`
void cuemu_set_shared_vars(const char* section, size_t bytes, size_t n, const cuemu_shared_var* vars) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    std::vector<SharedVar>& out = module_vars[section];
    std::vector<int16_t>& at = module_var_at[section];
    out.clear();
    at.assign((bytes + GRANULE - 1) / GRANULE, -1);
    for (size_t i = 0; i < n; ++i) {
        out.push_back({vars[i].offset, vars[i].size, vars[i].align, vars[i].name});
        for (size_t g = vars[i].offset / GRANULE; g < (vars[i].offset + vars[i].size + GRANULE - 1) / GRANULE; ++g)
            if (g < at.size()) at[g] = int16_t(i);
    }
}

void cuemu_traffic(uint64_t out[4]) {
    std::lock_guard<std::recursive_mutex> hold(lock);
    std::copy(std::begin(cur.traffic), std::end(cur.traffic), out);
}

size_t cuemu_report_count() { return reports.size() + (dropped ? 1 : 0); }

// "kind|text", the places in the text as file:line; valid until the next call
const char* cuemu_report_at(size_t i) {
    static std::string line;
    std::lock_guard<std::recursive_mutex> hold(lock);
    if (i >= reports.size()) {
        line = "sync|" + std::to_string(dropped) + " further reports dropped (more than " +
               std::to_string(MAX_REPORTS) + " distinct ones)";
        return line.c_str();
    }
    const Report& r = reports[i];
    line = r.text;
    for (auto [mark, pc] : {std::pair<const char*, uintptr_t>{"@1", r.pc}, {"@2", r.pc2}})
        if (size_t at = line.find(mark); at != std::string::npos) line.replace(at, 2, where(pc));
    line = std::string(KIND[r.kind]) + "|" + line + (r.count > 1 ? " (" + std::to_string(r.count) + " times)" : "");
    return line.c_str();
}

void cuemu_clear_reports() {
    std::lock_guard<std::recursive_mutex> hold(lock);
    reports.clear();
    dropped = 0;
}

}  // extern "C"
