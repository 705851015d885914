// cblas backend (cpu): LeNet forward, backward and plain SGD in C++, the interface the bindings
// see (cblas_net.cpp). Plain C++, no pybind11 types. All arrays are host arrays in canonical
// layouts (csrc/model.h), already validated by the caller:
//   images (n, 1, 28, 28) float32 finite, labels (n,) int32 in [0, 10), logits (n, 10) float32.
// Errors (allocation) arrive as C++ exceptions on the calling thread, whichever thread raised them.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "model.h"

namespace lenet {

class CpuNet {
public:
    // Copies the parameters. threads: compute threads, the calling one included (0: OpenBLAS's
    // default count, i.e. OPENBLAS_NUM_THREADS or the cores; 1: everything on the calling thread).
    // With more than one, a single image is split over the calling thread and one persistent
    // helper thread, and larger batches over `threads` threads.
    // isa: the vector kernels' instruction set, "auto" (the best this CPU has), "avx512", "avx2"
    // or "generic" (any x86-64); std::invalid_argument if this CPU lacks it.
    CpuNet(const float* const params[model::NUM_TENSORS], int threads, const std::string& isa = "auto");
    ~CpuNet();
    CpuNet(const CpuNet&) = delete;
    CpuNet& operator=(const CpuNet&) = delete;

    void predict(const float* images, int n, float* logits);
    // One SGD step on the mean softmax cross-entropy of (images, labels); returns the loss.
    double train_step(const float* images, const int32_t* labels, int n, float lr);
    void parameters(float* const out[model::NUM_TENSORS]);   // canonical layouts, copies
    int threads() const;
    const char* isa() const;   // the kernels in use

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

const char* blas_config();   // the OpenBLAS build in use

}  // namespace lenet
