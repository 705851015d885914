// cuemu_api.h: the C interface of the emulator's runtime (runtime.cpp) that host code uses: launches,
// device memory and reports. Included by the prelude cuemu.h, by the runtime itself, and by host
// libraries that keep their device memory under the emulator's checks (the tests' cuDNN stand-in, tests/cudnn_standin).
#pragma once
#include <cstddef>
#include <cstdint>

extern "C" {
struct cuemu_dim3 { unsigned x, y, z; };
typedef void (*cuemu_thunk)(const void* kernel, void** args);   // calls kernel(*args[0], ...)
// a pointer argument that stands for its own part of a larger device buffer (a tensor of a packed buffer):
// the kernel gets a copy of [pointer, pointer + bytes) with unowned guard zones around it (the device
// buffer's written state shared), so an access past it is `out-of-bounds` naming `name`
struct cuemu_arg_extent { unsigned arg; size_t bytes; const char* name; };
struct cuemu_launch_desc {
    const void* kernel;               // the kernel function (reports, cluster dims)
    cuemu_thunk thunk;
    void** args;
    cuemu_dim3 grid, block;
    const char* shared_lo;            // this module's "cuemu_shared" section (all its __shared__)
    const char* shared_hi;
    size_t static_shared;             // the kernel's own __shared__ bytes (0: the whole section)
    unsigned registers;               // per thread, from nvcc's resource report (0: unknown, not checked)
    unsigned max_threads;             // its __launch_bounds__ (nvcc's .maxntid; 0: none or unknown)
    const cuemu_arg_extent* extents;  // the arguments with an extent of their own (NULL: none)
    size_t n_extents;
};
int cuemu_launch(const cuemu_launch_desc* launch);
const char* cuemu_launch_refusal(const cuemu_launch_desc* launch);   // "" if sm_90 would run it
// device memory: 256-byte aligned, poisoned with NaN bytes, uninitialised until written
void* cuemu_malloc(size_t bytes);
void cuemu_free(void* device);
int cuemu_memcpy_htod(void* device, const void* host, size_t bytes);
int cuemu_memcpy_dtoh(void* host, const void* device, size_t bytes);
int cuemu_memset32(void* device, uint32_t value, size_t count);
int cuemu_mark_written(void* device, size_t bytes);   // host code wrote this range of a device buffer
size_t cuemu_first_unwritten(const void* device, size_t bytes);   // offset, `bytes` if all written, -1 if no buffer
void* cuemu_buffer_of(const void* device, size_t* bytes);   // base (and size) of its device buffer, or NULL
// host memory [host, host + bytes) that queued work will write (pending 1) or has written or dropped
// (0: every range starting in it): instrumented host code touching it meanwhile is a `sync` report
void cuemu_host_pending(const void* host, size_t bytes, int pending);
// bytes the kernels' threads loaded and stored since the library loaded, each access counted
// (before any cache or coalescing): device memory read, written; shared memory (DSMEM too) read, written
void cuemu_traffic(uint64_t out[4]);
size_t cuemu_report_count();
const char* cuemu_report_at(size_t i);   // "kind|text", places as file:line
void cuemu_clear_reports();
}
