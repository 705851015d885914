// Device and pinned memory of the stand-in, and its copies. Device memory is the CPU emulator's
// (python/lenet/emu, cuemu_api.h): allocated by it, poisoned with NaN bytes, tracked as never written
// until a copy, a library call (mark_written) or a kernel writes it, and bounds-checked on every access
// by the one kernel. So the stand-in's "read before written" refusals and the kernel's `uninitialised`
// reports come from one record. Pinned memory is host memory, filled with NaN bytes.
// Rules from the CUDA runtime API reference (cuda_runtime_api.h).
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "cuemu_api.h"
#include "standin.h"

namespace lenet::emu {

namespace {
constexpr unsigned char NAN_BYTES = 0xff;   // every byte of a fresh allocation: NaN as float32 (the emulator's too)
std::map<const char*, size_t> pinned;       // live cudaMallocHost allocations by base address: their sizes
std::map<Space, long> allocated, freed;
size_t device_bytes = 0;
constexpr size_t DEVICE_TOTAL = size_t(16) << 30;   // the stand-in device's nominal memory

const char* space_name(Space s) { return s == Space::device ? "device" : s == Space::pinned ? "pinned" : "pageable"; }

// The live pinned allocation holding p, or pinned.end().
std::map<const char*, size_t>::const_iterator pinned_holder(const void* p) {
    const char* c = static_cast<const char*>(p);
    auto it = pinned.upper_bound(c);
    if (it == pinned.begin()) return pinned.end();
    --it;
    return c < it->first + it->second ? it : pinned.end();
}

cudaError_t allocate(void** out, size_t bytes, Space space, const char* call) {
    return api<cudaError_t>(call, [&] {
        require(out != nullptr, cudaErrorInvalidValue, "the result pointer is NULL");
        // cudaStreamBeginCapture: a capturing thread is prohibited from potentially unsafe calls (allocation)
        forbid_during_capture("allocates memory", cudaErrorStreamCaptureUnsupported);
        *out = nullptr;
        if (bytes == 0) return;
        require(space != Space::device || bytes <= DEVICE_TOTAL - device_bytes, cudaErrorMemoryAllocation,
                std::to_string(bytes) + " bytes asked, " + std::to_string(DEVICE_TOTAL - device_bytes) + " free");
        // "suitably aligned for any kind of variable. The memory is not cleared": 256-byte aligned, poisoned
        char* p = space == Space::device ? static_cast<char*>(cuemu_malloc(bytes))
                                         : static_cast<char*>(std::aligned_alloc(256, (bytes + 255) / 256 * 256));
        require(p != nullptr, cudaErrorMemoryAllocation, "out of host memory");
        if (space == Space::pinned) {
            std::memset(p, NAN_BYTES, bytes);
            pinned[p] = bytes;
        }
        ++allocated[space];
        if (space == Space::device) device_bytes += bytes;
        *out = p;
    });
}

cudaError_t release(void* p, Space space, const char* call) {
    return api<cudaError_t>(call, [&] {
        if (!p) return;   // freeing NULL does nothing
        forbid_during_capture("frees memory", cudaErrorStreamCaptureUnsupported);
        size_t bytes = 0;
        const bool live = space == Space::device ? cuemu_buffer_of(p, &bytes) == p : pinned.count(static_cast<char*>(p)) > 0;
        if (!live) {
            misuse(std::string(call) + ": not a live " + space_name(space) + " allocation (freed twice?)");
            refuse(cudaErrorInvalidValue, std::string("not the base of a live ") + space_name(space) +
                                              " allocation (freed twice, or never allocated)");
        }
        ++freed[space];
        if (space == Space::device) {
            device_bytes -= bytes;
            cuemu_free(p);
        } else {
            cuemu_host_pending(p, pinned[static_cast<char*>(p)], 0);   // nothing queued may still write it
            pinned.erase(static_cast<char*>(p));
            std::free(p);
        }
    });
}
}  // namespace

Space space_of(const void* p) {
    if (cuemu_buffer_of(p, nullptr)) return Space::device;
    return pinned_holder(p) != pinned.end() ? Space::pinned : Space::pageable;
}

void need_device(const void* p, size_t bytes, int status, const std::string& what) {
    if (!p) refuse(status, what + " is NULL");
    size_t size = 0;
    const char* base = static_cast<const char*>(cuemu_buffer_of(p, &size));
    if (!base) refuse(status, what + " is not inside a live device allocation (cudaMalloc)");
    const size_t offset = size_t(static_cast<const char*>(p) - base);
    if (offset + bytes > size)
        refuse(status, what + " needs " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                           " of an allocation of " + std::to_string(size) + " bytes");
}

void need_written(const float* p, size_t count, int status, const std::string& what) {
    const size_t at = cuemu_first_unwritten(p, count * sizeof(float));
    if (at == size_t(-1)) refuse(status, what + " is not inside a live device allocation (cudaMalloc)");
    if (at < count * sizeof(float))
        refuse(status, what + " element " + std::to_string(at / sizeof(float)) +
                           " is read before anything wrote it (cudaMalloc: \"the memory is not cleared\")");
}

void mark_written(const void* p, size_t bytes) {
    if (bytes) cuemu_mark_written(const_cast<void*>(p), bytes);
}

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
    const char *x = static_cast<const char*>(a), *y = static_cast<const char*>(b);
    return x < y + b_bytes && y < x + a_bytes;
}

float host_scalar(const void* p, int status, const char* name) {
    // cuDNN "alpha, beta: pointers to scaling factors (in host memory)"; cuBLAS CUBLAS_POINTER_MODE_HOST
    require(p != nullptr, status, std::string(name) + " is NULL");
    require(space_of(p) != Space::device, status, std::string(name) + " points to device memory; it must be a host pointer");
    float v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

std::vector<Counts> memory_counts() {
    return {{"device allocation", allocated[Space::device] - freed[Space::device]},
            {"pinned allocation", allocated[Space::pinned] - freed[Space::pinned]}};
}

}  // namespace lenet::emu

using namespace lenet::emu;

// A copy whose device side has been checked: through the emulator, so that what it writes counts as written.
static void copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    if (kind == cudaMemcpyHostToDevice) {
        cuemu_memcpy_htod(dst, src, count);
    } else if (kind == cudaMemcpyDeviceToHost) {
        cuemu_memcpy_dtoh(dst, src, count);
    } else {
        std::memmove(dst, src, count);
        mark_written(dst, count);
    }
}

cudaError_t cudaMalloc(void** p, size_t bytes) { return allocate(p, bytes, Space::device, "cudaMalloc"); }
cudaError_t cudaMallocHost(void** p, size_t bytes) { return allocate(p, bytes, Space::pinned, "cudaMallocHost"); }
cudaError_t cudaFree(void* p) { return release(p, Space::device, "cudaFree"); }
cudaError_t cudaFreeHost(void* p) { return release(p, Space::pinned, "cudaFreeHost"); }

cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
    return api<cudaError_t>("cudaMemGetInfo", [&] {
        require(free && total, cudaErrorInvalidValue, "free or total is NULL");
        *total = DEVICE_TOTAL;
        *free = DEVICE_TOTAL - device_bytes;
    });
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind, cudaStream_t stream) {
    return api<cudaError_t>("cudaMemcpyAsync", [&] {
        need_stream(stream, cudaErrorInvalidResourceHandle);
        require(kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice,
                cudaErrorInvalidMemcpyDirection, "kind must be HostToDevice, DeviceToHost or DeviceToDevice here");
        const bool to_device = kind != cudaMemcpyDeviceToHost, from_device = kind != cudaMemcpyHostToDevice;
        const void* host = !from_device ? src : !to_device ? dst : nullptr;   // NULL for device to device
        if (to_device) need_device(dst, count, cudaErrorInvalidValue, "dst");
        if (from_device) need_device(src, count, cudaErrorInvalidValue, "src");
        if (to_device != from_device) {
            require(host != nullptr, cudaErrorInvalidValue, "the host pointer is NULL");
            require(space_of(host) != Space::device, cudaErrorInvalidValue,
                    "the host side of the copy is device memory: the kind does not match the pointers");
        }
        const bool pageable = host && space_of(host) == Space::pageable;
        if (pageable && capturing(stream))   // a pageable copy synchronises the host, which capture cannot record
            forbid_during_capture("copies pageable host memory (synchronous, not capturable)",
                                  cudaErrorStreamCaptureUnsupported);
        if (pageable && kind == cudaMemcpyDeviceToHost) {   // "returns only once the copy has completed"
            synchronize_all();
            copy(dst, src, count, kind);
            return;
        }
        if (pageable) {   // pageable -> device: "returns once the pageable buffer has been copied to staging"
            auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                              static_cast<const char*>(src) + count);
            enqueue(stream, [=] {
                need_device(dst, count, cudaErrorIllegalAddress, "dst (at execution)");
                copy(dst, staged->data(), count, kind);
            }, "cudaMemcpyAsync");
            return;
        }
        // the host must not use a pinned destination before the stream has run the copy (emulator: `sync`)
        const bool to_pinned = kind == cudaMemcpyDeviceToHost && !capturing(stream);
        if (to_pinned) cuemu_host_pending(dst, count, 1);
        enqueue(stream, [=] {   // pinned and device memory are read when the copy runs (a graph replay re-reads)
            if (to_pinned) cuemu_host_pending(dst, count, 0);
            if (to_device) need_device(dst, count, cudaErrorIllegalAddress, "dst (at execution)");
            if (from_device) need_device(src, count, cudaErrorIllegalAddress, "src (at execution)");
            if (host)
                require(space_of(host) == Space::pinned, cudaErrorIllegalAddress,
                        "the pinned host buffer was freed before the copy ran");
            copy(dst, src, count, kind);
        }, "cudaMemcpyAsync");
    });
}
