// cudnn backend (gpu): LeNet on cuDNN + cuBLAS, the interface the bindings see (cudnn_net.cu).
// Plain C++ (no CUDA or pybind11 types), so cudnn_bind.cpp compiles with g++ alone. All arrays are
// host arrays in canonical layouts (csrc/model.h), already validated by the caller:
//   images (n, 1, 28, 28) float32, labels (n,) int32 in [0, 10), logits (n, 10) float32.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model.h"

namespace lenet {

using model::NUM_TENSORS;           // the eight parameter tensors, in model::NAMES order
constexpr int MAX_BATCH = 65536;   // keeps every cuDNN tensor below 2^31 elements
constexpr size_t MAX_PLANS = 4;    // batch sizes other than 1 whose plans are kept (least recently used goes)

// CUDA-event times (us) of the forward, copies excluded (see CudnnNet::device_times_us).
struct DeviceTimes {
    std::vector<float> forward;   // as forward() enqueues it, launch gaps included
    std::vector<float> kernels;   // a copy-free CUDA graph of the same calls, replayed
};

class CudnnNet {
public:
    // Uploads the parameters once. use_graph: batch-1 inference replays one captured CUDA graph
    // (H2D copy, forward, D2H copy); deterministic: training uses deterministic cuDNN algorithms only.
    CudnnNet(const float* const params[NUM_TENSORS], bool use_graph, bool deterministic);
    ~CudnnNet();
    CudnnNet(const CudnnNet&) = delete;
    CudnnNet& operator=(const CudnnNet&) = delete;

    // The timing split: predict == upload, forward, download. upload stages the images (and starts
    // the H2D copy on the plain path), forward enqueues the device work, download waits and copies
    // the logits out. Each returns without waiting except download and synchronize.
    void upload(const float* images, int n);
    void forward(int n);
    void download(float* logits, int n);
    void synchronize();

    // One SGD step on the mean softmax cross-entropy, all on the device; returns the batch loss.
    float train_step(const float* images, const int* labels, int n, float lr);
    void parameters(float* const out[NUM_TENSORS]);          // device -> host, canonical layouts
    DeviceTimes device_times_us(const float* images, int n, int repeats);   // CUDA events, µs
    // CUDA-event times of each layer's calls, one image: {layer: [µs per repeat]}, in forward order
    std::vector<std::pair<std::string, std::vector<double>>> layer_times_us(const float* image, int repeats);
    std::string describe() const;   // per cached plan (batch size): the chosen cuDNN algorithms, workspace
    int plans_made() const;         // plans made so far (each runs the cudnnFind* calls); evictions re-plan

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

std::pair<size_t, size_t> cuda_mem_info();   // (free, total) device bytes, cudaMemGetInfo

}  // namespace lenet
