// cblas backend (cpu): LeNet forward, backward and plain SGD in C++, the interface the bindings see
// (cblas_net.cpp lists the parts). Plain C++, no pybind11 types. All arrays are host arrays in
// the canonical layouts of lenet.model, already validated by the caller:
//   images (n, 1, 28, 28) float32 finite, labels (n,) int32 in [0, 10), logits (n, 10) float32.
// Errors (allocation) arrive as C++ exceptions on the calling thread, whichever thread raised them.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model.h"

namespace lenet {
namespace cblas {
struct Net;   // the implementation (cblas_impl.h)
}

class CpuNet {
public:
    // Copies the parameters. threads: compute threads, the calling one included (0: OpenBLAS's
    // default count, i.e. OPENBLAS_NUM_THREADS or the cores; 1: everything on the calling thread).
    // With more than one, the work is split over the calling thread and threads - 1 persistent
    // helper threads (a single image over two of them), which end with the net; in the child of
    // fork() new ones start when needed.
    // isa: the vector kernels' instruction set, "auto" (the best this CPU has), "avx512", "avx2"
    // or "generic" (any x86-64); std::invalid_argument if this CPU lacks it.
    // split: how a single image's work is cut over two threads, "channels", "rows" (avx512 only)
    // or "auto": whichever of the two its recent images took less time in (avx512; else channels).
    // balance: the cuts move to whichever thread runs faster (cuts()); false: they stay where set.
    CpuNet(const float* const params[model::NUM_TENSORS], int threads, const std::string& isa = "auto",
           const std::string& split = "auto", bool balance = true);
    ~CpuNet();
    CpuNet(const CpuNet&) = delete;
    CpuNet& operator=(const CpuNet&) = delete;

    // logits (n, 10) of images (n, 784); std::invalid_argument if any image holds NaN or infinity.
    void predict(const float* images, int n, float* logits);
    // One SGD step on the mean softmax cross-entropy of (images, labels); returns the loss.
    double train_step(const float* images, const int32_t* labels, int n, float lr);
    void parameters(float* const out[model::NUM_TENSORS]);   // canonical layouts, copies
    // `repeats` single-image forwards of `image` (784 floats), timed per fused group of layers:
    // [(group name, wall time per repeat in µs)] in forward order ("conv1+pool1", ...); and in
    // helper_starts, for each forward whose second half a helper thread took, its start delay (µs
    // after the forward began: the cost of handing work to another core); in by_rows, for each
    // forward, whether it was split by rows.
    std::vector<std::pair<std::string, std::vector<double>>> layer_times(const float* image, int repeats,
                                                                         std::vector<double>& helper_starts,
                                                                         std::vector<bool>& by_rows);
    int threads() const;
    const char* isa() const;   // the kernels in use
    // Where a single image's work is cut between its two threads now: the calling thread's part of
    // conv1's and conv2's output channels and of fc1's rows (split by rows only fc1's applies), which
    // moves to whichever thread runs faster (csrc/NOTES.md v46). set_cuts: std::invalid_argument
    // unless each is a whole number of its kernel's blocks that leaves each thread at least one.
    std::array<int, 3> cuts();
    void set_cuts(const std::array<int, 3>& cuts);

private:
    std::unique_ptr<cblas::Net> impl_;
};

const char* blas_config();   // the OpenBLAS build in use

}  // namespace lenet
