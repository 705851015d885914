// The stand-in CUDA runtime, cuDNN and cuBLAS for csrc/cudnn_net.cu, executed on the CPU (tests only;
// docs/cudnn-standin.md). It implements exactly the calls cudnn_net.cu and cudnn_bind.cpp make, against
// the real headers, and refuses what the documentation forbids: each refusal returns the library's
// status and records "<call>: <rule>", which the library's error-string function then returns, so
// LENET_CHECK's message names the call, the rule, and the line of cudnn_net.cu.
// This header is shared by the files of tests/cudnn_standin only.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace lenet::emu {

// --- refusals ------------------------------------------------------------------------------------
struct Refusal {
    int status;         // a cudaError_t, cudnnStatus_t or cublasStatus_t
    std::string rule;   // what the documentation requires
};
[[noreturn]] inline void refuse(int status, const std::string& rule) { throw Refusal{status, rule}; }
inline void require(bool ok, int status, const std::string& rule) {
    if (!ok) refuse(status, rule);
}

// Refuses with what the CPU emulator reported between calls (instrumented host code of cudnn_net.cu
// using pinned memory a queued copy still writes), if anything (cudnn_net_kernels.cpp).
void emulator_reports();

// Runs `body` for API function `call`: success, or the refused status with its rule recorded. A CUDA
// runtime call first refuses with the emulator's reports made since the last call.
void record(const char* call, int status, const std::string& rule);
template <class Status, class Body>
Status api(const char* call, Body body) {
    try {
        if constexpr (std::is_same_v<Status, cudaError_t>) emulator_reports();
        body();
        return Status(0);   // cudaSuccess, CUDNN_STATUS_SUCCESS, CUBLAS_STATUS_SUCCESS
    } catch (const Refusal& r) {
        record(call, r.status, r.rule);
        return Status(r.status);
    }
}
// "<name> (stand-in: <call>: <rule>)" when the last refusal returned `status` ("stand-in: <call>: <rule>"
// if bare: for the error-string functions whose text LENET_CHECK puts in parentheses), else the name.
const char* describe(int status, const char* name, bool bare = false);

// --- objects: every handle and descriptor is created once and destroyed exactly once ----------------
void born(const void* object, const char* kind);
bool alive(const void* object, const char* kind);
void need_alive(const void* object, const char* kind, int status, const std::string& what);
void die(const void* object, const char* kind, int status, const char* call);   // refuses a second destroy

// Create and destroy of an object kept in the ledger as `kind` (destroying NULL does nothing).
template <class Status, class T>
Status create_object(T** out, const char* kind, const char* call, int bad) {
    return api<Status>(call, [&] {
        require(out != nullptr, bad, "the result pointer is NULL");
        *out = new T;
        born(*out, kind);
    });
}
template <class Status, class T>
Status destroy_object(T* object, const char* kind, const char* call, int bad) {
    return api<Status>(call, [&] {
        if (!object) return;
        die(object, kind, bad, call);
        delete object;
    });
}

// --- memory: device memory is the emulator's (memory.cpp) ---------------------------------------------
enum class Space { device, pinned, pageable };
Space space_of(const void* p);   // a live allocation's space; pageable for any other host pointer
// [p, p + bytes) lies inside one live device allocation, else refuse(status, what + why)
void need_device(const void* p, size_t bytes, int status, const std::string& what);
// every element of the device floats [p, p + count) was written (by a copy, a library call or a kernel)
void need_written(const float* p, size_t count, int status, const std::string& what);
// the stand-in wrote the device bytes [p, p + bytes) itself (a library call's output)
void mark_written(const void* p, size_t bytes);
bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes);
// alpha/beta style scalars: a readable host pointer, not device memory
float host_scalar(const void* p, int status, const char* name);

// --- streams -----------------------------------------------------------------------------------------
// Work on a stream runs later, in order, at a synchronisation point (the adversarial schedule for the
// host: nothing has happened until the code waits); while the stream captures, it is recorded instead.
using Work = std::function<void()>;
void enqueue(cudaStream_t stream, Work work, const char* call);
bool capturing(cudaStream_t stream);
bool capturing_any();   // a capture is under way on this thread (cudaStreamCaptureModeThreadLocal)
// An API call that is illegal during capture: invalidates the capture and refuses.
void forbid_during_capture(const char* why, int status);
void need_stream(cudaStream_t stream, int status);   // 0 (the legacy default stream) or a live stream
void synchronize_all();                              // runs every queued work item

// --- kernels: the emulator's launch of a __global__ function, registered by its address ---------------
using Launch = std::function<Work(void** args, dim3 grid, dim3 block, size_t shared)>;
void register_kernel(const void* function, const char* name, Launch launch);
const Launch* find_kernel(const void* function);

// --- counts for the tests ----------------------------------------------------------------------------
struct Counts {
    std::string kind;
    long live;
};
std::vector<Counts> live_counts();             // live objects and allocations by kind
std::vector<Counts> memory_counts();           // live allocations by space (memory.cpp)
void misuse(const std::string& what);          // a double destroy or free, kept for the tests
std::vector<std::string> misuses();            // double destroys and frees, in order
void reset_misuses();

}  // namespace lenet::emu
