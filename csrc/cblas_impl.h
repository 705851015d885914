// cblas backend, internal: what a CpuNet holds (parameters, kernels, workers, buffers), and the
// forward (cblas_forward.cpp) and training (cblas_backward.cpp) passes over it.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cblas_kernels.h"
#include "cblas_net.h"
#include "cblas_workers.h"

namespace lenet::cblas {

using Params = std::vector<float>[NUM_TENSORS];

constexpr int CHUNK = 64;    // a batch is processed CHUNK images at a time
constexpr int SMALL = 4;     // batches up to this size are predicted image by image

// The fused groups of one single-image forward, in order (layer_times).
constexpr int GROUPS = 4;
constexpr std::array<const char*, GROUPS> GROUP_NAMES = {"conv1+pool1", "conv2+pool2", "fc1", "fc2"};

template <class T>
T* grown(std::vector<T>& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
}

// One image's activations for the single-image forward (split over two workers).
struct Single {
    alignas(64) float x[XPAD] = {};
    alignas(64) float conv1[C1 * R1], pool1[POOL1], conv2[C2 * P2], flat[FLAT], hidden[HID];
};

// One unit's share of a batch, in chunks of at most CHUNK images: per-image scratch (stays in L2),
// the chunk's activations (what backward needs), and the unit's gradient sums (layouts as p).
struct Share {
    std::vector<float> g[NUM_TENSORS];
    std::vector<float> xpad = std::vector<float>(XPAD), conv1 = std::vector<float>(C1 * R1);   // per image
    std::vector<float> conv2 = std::vector<float>(C2 * P2), dpool1 = std::vector<float>(POOL1S);
    std::vector<float> scratch = std::vector<float>(std::max(BACK2_SCRATCH, BACK1_SCRATCH));
    std::vector<float> pool1, flat, relu, dlogits, dh, dflat;   // per chunk; pool1 (n, POOL1S)
    std::vector<uint8_t> arg1, arg2;
};

// Parameter tensor t here: rows of its canonical layout, each padded to stride(t) floats (the conv
// weights, for whole vectors in the backward kernels; the padding stays zero).
constexpr int rows(int t) { return SHAPES[t][0]; }
constexpr int stride(int t) { return t == W1 ? W1S : t == W2 ? W2S : size(t) / rows(t); }

// C (m, n) = beta·C + op(A) (m, k) · op(B) (k, n), row-major, OpenBLAS.
void gemm(bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float beta, float* c);

struct Net {
    Params p;                           // parameters, rows padded to stride(t)
    const Kernels& k;
    Workers workers;
    Single single;
    std::vector<Share> shares;          // one per unit of a batch
    std::mutex mu;                      // one call at a time per net; held across fork() (cblas_net.cpp)

    Net(int threads, const std::string& isa);

    // cblas_forward.cpp
    void forward_one(const float* x, float* logits);   // one image, split over up to two workers
    // `repeats` forwards of one image; times[group] gets each group's wall time (µs) per repeat.
    void time_one(const float* x, int repeats, std::vector<double> times[GROUPS]);
    void predict(const float* x, int n, float* logits);
    // A share's forward of n <= CHUNK images, keeping what backward needs.
    void forward_chunk(Share& s, const float* x, int n, float* logits);
    // cblas_backward.cpp
    double train_step(const float* x, const int32_t* labels, int n, float lr);

    // The batch split: the images in share_count(n) contiguous ranges, one unit each.
    int share_count(int n) const { return n > SMALL ? std::min(workers.slots(), n) : 1; }
};

}  // namespace lenet::cblas
