// Status checks and RAII owners for the CUDA path (nvcc only; no pybind11 here).
// LENET_CHECK(call) throws lenet::CudaError("<call> failed: <status> (<text>) at <file>:<line>") for a
// CUDA runtime, cuDNN or cuBLAS status that is not success; the bindings turn it into RuntimeError.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

namespace lenet {

struct CudaError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

[[noreturn]] inline void fail(const char* call, const std::string& status, const char* file, int line) {
    const char* base = std::strstr(file, "csrc/");
    throw CudaError(std::string(call) + " failed: " + status + " at " + (base ? base : file) + ":" + std::to_string(line));
}
inline void check(cudaError_t s, const char* call, const char* file, int line) {
    if (s != cudaSuccess) fail(call, std::string(cudaGetErrorName(s)) + " (" + cudaGetErrorString(s) + ")", file, line);
}
inline void check(cudnnStatus_t s, const char* call, const char* file, int line) {
    if (s != CUDNN_STATUS_SUCCESS) fail(call, cudnnGetErrorString(s), file, line);
}
inline void check(cublasStatus_t s, const char* call, const char* file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS)
        fail(call, std::string(cublasGetStatusName(s)) + " (" + cublasGetStatusString(s) + ")", file, line);
}
#define LENET_CHECK(call) ::lenet::check((call), #call, __FILE__, __LINE__)

// Owned<H, Destroy>: a unique owner of the opaque handle H (a pointer type), released with Destroy
// (its status ignored: destructors must not throw).
template <class H, auto Destroy>
struct Release {
    void operator()(H h) const noexcept { (void)Destroy(h); }
};
template <class H, auto Destroy>
using Owned = std::unique_ptr<std::remove_pointer_t<H>, Release<H, Destroy>>;

// LENET_OWN(Owner, create, args...): calls create(&handle, args...), checks its status like LENET_CHECK
// (the message shows the call as "create(&h, args...)") and returns the handle owned by Owner, e.g.
//   TensorDesc d = LENET_OWN(TensorDesc, cudnnCreateTensorDescriptor);
// `create` must name one function (not an overload set: cudaEventCreateWithFlags, not cudaEventCreate).
template <class O, class Create, class... Args>
O own(const char* what, const char* file, int line, Create create, Args... args) {
    typename O::pointer h = nullptr;
    const auto status = create(&h, args...);
    O owned(h);   // owned before the check: a failed create leaves nothing behind
    std::string call(what);   // "create, a, b" -> "create(&h, a, b)"
    const size_t comma = call.find(',');
    call = comma == std::string::npos ? call + "(&h)" : call.substr(0, comma) + "(&h," + call.substr(comma + 1) + ")";
    check(status, call.c_str(), file, line);
    return owned;
}
#define LENET_OWN(Owner, ...) ::lenet::own<Owner>(#__VA_ARGS__, __FILE__, __LINE__, __VA_ARGS__)

using Stream = Owned<cudaStream_t, cudaStreamDestroy>;
using Event = Owned<cudaEvent_t, cudaEventDestroy>;
using Graph = Owned<cudaGraph_t, cudaGraphDestroy>;
using GraphExec = Owned<cudaGraphExec_t, cudaGraphExecDestroy>;
using CudnnHandle = Owned<cudnnHandle_t, cudnnDestroy>;
using CublasHandle = Owned<cublasHandle_t, cublasDestroy>;
using TensorDesc = Owned<cudnnTensorDescriptor_t, cudnnDestroyTensorDescriptor>;
using FilterDesc = Owned<cudnnFilterDescriptor_t, cudnnDestroyFilterDescriptor>;
using ConvDesc = Owned<cudnnConvolutionDescriptor_t, cudnnDestroyConvolutionDescriptor>;
using PoolDesc = Owned<cudnnPoolingDescriptor_t, cudnnDestroyPoolingDescriptor>;
using ActDesc = Owned<cudnnActivationDescriptor_t, cudnnDestroyActivationDescriptor>;

// Device memory (cudaMalloc) and pinned host memory (cudaMallocHost) of `count` elements of T.
template <class T>
using DeviceArray = std::unique_ptr<T, Release<void*, cudaFree>>;
template <class T>
using PinnedArray = std::unique_ptr<T, Release<void*, cudaFreeHost>>;

template <class T>
DeviceArray<T> device_array(size_t count) {
    void* p = nullptr;
    LENET_CHECK(cudaMalloc(&p, count * sizeof(T)));
    return DeviceArray<T>(static_cast<T*>(p));
}
template <class T>
PinnedArray<T> pinned_array(size_t count) {
    void* p = nullptr;
    LENET_CHECK(cudaMallocHost(&p, count * sizeof(T)));
    return PinnedArray<T>(static_cast<T*>(p));
}

}  // namespace lenet
