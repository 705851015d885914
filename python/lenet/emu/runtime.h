// runtime.h: the emulator runtime's internal state, shared by runtime.cpp (launches, scheduling,
// barriers, shuffles, clusters, memory, reports), shadow.cpp (the checked loads and stores) and
// fiber.cpp (one fiber per CUDA thread). One launch runs at a time, on the calling OS thread.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

namespace cuemu {

constexpr uint32_t MANY = 0xffffffffu;   // "more than one" in an access summary
constexpr size_t GRANULE = 4;            // bytes per shadow cell
constexpr size_t ARG_GUARD = size_t(64) << 10;   // unowned bytes on each side of an argument's copy (cuemu_arg_extent)

// The running thread as the race check sees it (kept in cur.who while it runs).
struct Who {
    uint32_t cluster;      // the cluster's linear id in the grid
    uint32_t cep;          // cluster epoch: cluster barriers passed
    uint32_t block;        // the block's linear id in the grid
    uint32_t bep;          // block epoch: __syncthreads and cluster barriers passed
    uint32_t thread;       // linear id in the block
};

// Who touched a 4-byte granule, summarised exactly enough to decide CUDA ordering (shadow.cpp):
// of the accesses summarised, the latest cluster epoch, the block at it (or MANY), that block's
// latest epoch and the thread at it (or MANY); cluster MANY when several clusters took part.
struct Access {
    uintptr_t pc;          // code address of the latest such access (for reports)
    uint32_t stamp;        // launch id (device memory) or block instance (shared memory); 0: none
    Who who;
};
struct Cell {
    Access w;              // the last write (w.stamp != 0 on device memory: initialised)
    Access r;              // the reads since it
};

enum class State : uint8_t { RUN, BAR, CBAR, SHFL, DONE };

// where a barrier or shuffle is in the source: threads meet only at the same one
std::string base_name(const std::string& path);   // symbols.cpp

struct Site {
    const char* file = nullptr;
    int line = 0;
    bool operator!=(const Site& o) const {
        return line != o.line || (file != o.file && (!file || !o.file || std::strcmp(file, o.file) != 0));
    }
    std::string str() const { return base_name(file ? file : "?") + ":" + std::to_string(line); }
};

struct Block;
struct Fiber {
    void* sp = nullptr;                  // saved stack pointer while switched out
    char* stack_lo = nullptr;
    char* stack_hi = nullptr;
    Block* block = nullptr;
    uint32_t x = 0, y = 0, z = 0;        // threadIdx
    uint32_t linear = 0;                 // x + y bx + z bx by: lane = linear % 32
    State state = State::RUN;
    uint64_t shfl_bits = 0, shfl_result = 0;
    int shfl_arg = 0;
};

struct Warp {
    uint32_t arrived = 0, mask = 0, exited = 0;   // lanes
    Site site;
    int kind = 0, width = 0;
};

struct Cluster;
struct Block {
    uint32_t x, y, z, linear, rank;      // blockIdx, its linear id in the grid, rank in the cluster
    uint32_t stamp;                      // instance id: shared-memory shadow older than it is stale
    uint32_t bep = 0;                    // block epoch: __syncthreads and cluster barriers passed
    Cluster* cluster;
    Fiber* fibers;                       // blockDim threads
    std::vector<uint32_t> runnable;      // fiber indices, FIFO from `head`
    size_t head = 0;
    uint32_t bar_waiting = 0, exited = 0;
    Site bar_site;
    std::vector<Warp> warps;
    char* saved;                         // its shared memory while another block is resident
    Cell* shadow;                        // its shared memory's shadow
    uint32_t remote_cep = MANY;          // cluster epoch of the last DSMEM access by a sibling
    uintptr_t remote_pc = 0;
    uint32_t remote_by = 0;              // the sibling's rank
};

struct Cluster {
    uint32_t linear, cep = 0;
    uint32_t waiting = 0, live = 0, threads = 0;
    Site site;
    std::vector<Block> blocks;
};

struct SharedVar { size_t offset, size, align; std::string name; };

// a device buffer, or a launch's copy of one argument's extent (`name` set; its shadow is the buffer's)
struct Alloc { char* lo; size_t size; Cell* shadow; size_t shadow_bytes; std::string name; };

// The running launch and the current thread: what every hook reads.
struct Current {
    bool running = false, aborted = false;
    uint32_t launch = 0;
    Who who{};                           // the current thread
    Fiber* fiber = nullptr;
    Block* block = nullptr;              // the current thread's block
    Block* resident = nullptr;           // the block whose shared memory is in the section
    char *stack_lo = nullptr, *stack_hi = nullptr;
    char *shared_lo = nullptr, *shared_hi = nullptr;   // the module's "cuemu_shared" section
    char *saved_lo = nullptr, *saved_hi = nullptr;     // every block's save area (clusters)
    size_t shared_size = 0;
    const std::vector<SharedVar>* vars = nullptr;      // alignments from nvcc's PTX, if known
    const int16_t* var_at = nullptr;     // per shared granule: index in *vars, -1 in no variable (red zone)
    size_t min_var_align = 16;
    Cluster* cluster = nullptr;
    uint32_t bx = 1, by = 1, bz = 1, gx = 1, gy = 1, gz = 1, threads = 1;
    uint64_t traffic[4] = {};            // bytes the threads accessed: cuemu_traffic's order
};
extern Current cur;
extern std::map<uintptr_t, Alloc> allocs;   // device allocations by start address
extern std::map<uintptr_t, size_t> host_pending;   // host ranges queued work will still write (cuemu_host_pending)

// runtime.cpp
enum Kind { RACE, OOB, MISALIGNED, UNINIT, SYNC, DSMEM, LAUNCH };
// Records a report ("@1"/"@2" in text stand for pc/pc2 as file:line); a fatal one ends the launch.
void report(Kind kind, const std::string& text, uintptr_t pc, uintptr_t pc2, bool fatal);
bool known(Kind kind, uintptr_t pc, uintptr_t pc2);   // counted again if already reported (no text built)
std::string who(const Fiber* f);          // "block (x,y,z) thread (x,y,z)"
void dsmem_accessed(Block* owner, uintptr_t pc);
void refresh_who();                       // after the current thread's epochs changed
std::string hex(uintptr_t v);

// fiber.cpp
void fibers_reserve(size_t count);
Fiber* fiber_at(size_t i);
void fiber_start(Fiber* f, void (*entry)());
void fiber_run(Fiber* f);                 // scheduler -> f, until it yields or exits
void fiber_yield();                       // current fiber -> scheduler
[[noreturn]] void fiber_exit();

// shadow.cpp
Cell* shadow_map(size_t bytes, size_t* mapped);
void shadow_unmap(Cell* cells, size_t mapped);
void forget(const Alloc* a);          // drop it from the shadow's cache of recent buffers
void mark_host_write(const Alloc& a, size_t offset, size_t bytes, uint32_t stamp);
size_t first_unwritten(const Alloc& a, size_t offset, size_t bytes);   // its offset from `offset`, or `bytes`
const Alloc* alloc_of(const void* p, size_t bytes);

// symbols.cpp
std::string where(uintptr_t pc);          // "file:line (function)[, inlined at ...]" of a code address

}  // namespace cuemu
