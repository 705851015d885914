// Device and pinned memory of the reference: an allocation registry, poisoned allocations, copies.
// Rules from the CUDA runtime API reference (cuda_runtime_api.h).
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "reference.h"

namespace lenet::emu {

namespace {
struct Block {
    size_t bytes;
    Space space;
};
std::map<const char*, Block> blocks;          // live allocations by base address
std::map<Space, long> allocated, freed;
size_t device_bytes = 0;
constexpr size_t DEVICE_TOTAL = size_t(16) << 30;   // the reference device's nominal memory

// The live allocation holding p, or blocks.end().
std::map<const char*, Block>::const_iterator holder(const void* p) {
    const char* c = static_cast<const char*>(p);
    auto it = blocks.upper_bound(c);
    if (it == blocks.begin()) return blocks.end();
    --it;
    return c < it->first + it->second.bytes ? it : blocks.end();
}

const char* space_name(Space s) { return s == Space::device ? "device" : s == Space::pinned ? "pinned" : "pageable"; }

cudaError_t allocate(void** out, size_t bytes, Space space, const char* call) {
    return api<cudaError_t>(call, [&] {
        require(out != nullptr, cudaErrorInvalidValue, "the result pointer is NULL");
        // cudaStreamBeginCapture: a capturing thread is prohibited from potentially unsafe calls (allocation)
        forbid_during_capture("allocates memory", cudaErrorStreamCaptureUnsupported);
        *out = nullptr;
        if (bytes == 0) return;
        // "suitably aligned for any kind of variable. The memory is not cleared": 256-byte aligned, poisoned
        const size_t rounded = (bytes + 255) / 256 * 256;
        char* p = static_cast<char*>(std::aligned_alloc(256, rounded));
        require(p != nullptr, cudaErrorMemoryAllocation, "out of host memory");
        for (size_t i = 0; i + 4 <= rounded; i += 4) std::memcpy(p + i, &POISON, 4);
        blocks[p] = Block{bytes, space};
        ++allocated[space];
        if (space == Space::device) device_bytes += bytes;
        *out = p;
    });
}

cudaError_t release(void* p, Space space, const char* call) {
    return api<cudaError_t>(call, [&] {
        if (!p) return;   // freeing NULL does nothing
        forbid_during_capture("frees memory", cudaErrorStreamCaptureUnsupported);
        auto it = blocks.find(static_cast<const char*>(p));
        if (it == blocks.end() || it->second.space != space) {
            misuse(std::string(call) + ": not a live " + space_name(space) + " allocation (freed twice?)");
            refuse(cudaErrorInvalidValue, std::string("not the base of a live ") + space_name(space) +
                                              " allocation (freed twice, or never allocated)");
        }
        if (space == Space::device) device_bytes -= it->second.bytes;
        ++freed[space];
        blocks.erase(it);
        std::free(p);
    });
}
}  // namespace

Space space_of(const void* p) {
    auto it = holder(p);
    return it == blocks.end() ? Space::pageable : it->second.space;
}

void need_device(const void* p, size_t bytes, int status, const std::string& what) {
    if (!p) refuse(status, what + " is NULL");
    auto it = holder(p);
    if (it == blocks.end() || it->second.space != Space::device)
        refuse(status, what + " is not inside a live device allocation (cudaMalloc)");
    const size_t offset = size_t(static_cast<const char*>(p) - it->first);
    if (offset + bytes > it->second.bytes)
        refuse(status, what + " needs " + std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                           " of an allocation of " + std::to_string(it->second.bytes) + " bytes");
}

void need_written(const float* p, size_t count, int status, const std::string& what) {
    for (size_t i = 0; i < count; ++i) {
        uint32_t bits;
        std::memcpy(&bits, p + i, 4);
        if (bits == POISON)
            refuse(status, what + " element " + std::to_string(i) +
                               " is read before anything wrote it (cudaMalloc: \"the memory is not cleared\")");
    }
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
            std::memcpy(dst, src, count);
            return;
        }
        if (pageable) {   // pageable -> device: "returns once the pageable buffer has been copied to staging"
            auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src),
                                                              static_cast<const char*>(src) + count);
            enqueue(stream, [=] {
                need_device(dst, count, cudaErrorIllegalAddress, "dst (at execution)");
                std::memcpy(dst, staged->data(), count);
            }, "cudaMemcpyAsync");
            return;
        }
        enqueue(stream, [=] {   // pinned and device memory are read when the copy runs (a graph replay re-reads)
            if (to_device) need_device(dst, count, cudaErrorIllegalAddress, "dst (at execution)");
            if (from_device) need_device(src, count, cudaErrorIllegalAddress, "src (at execution)");
            if (host)
                require(space_of(host) == Space::pinned, cudaErrorIllegalAddress,
                        "the pinned host buffer was freed before the copy ran");
            std::memmove(dst, src, count);
        }, "cudaMemcpyAsync");
    });
}
