// cblas backend: the forward pass (cblas_impl.h).
// One image: three groups (conv1+pool1, conv2+pool2, fc1+ReLU), each split into two units of half
// the output channels / rows, run by the workers (cblas_workers.h); each group reads all of the
// previous one; then fc2 on the calling thread. Batches of more than SMALL images: split into
// contiguous ranges, one unit each, each range in chunks of at most CHUNK images (the dense layers
// as one OpenBLAS sgemm per chunk).
#include <chrono>
#include <cstring>

#include <cblas.h>

#include "cblas_impl.h"

namespace lenet::cblas {
namespace {

// The single-image forward; with TIMED, each group's wall time (µs) is appended to times[group]
// (a separate instantiation: the untimed path has no clock reads).
template <bool TIMED>
void one_image(Net& m, const float* image, float* logits, std::vector<double>* times) {
    using clock = std::chrono::steady_clock;
    [[maybe_unused]] clock::time_point t0;
    [[maybe_unused]] auto lap = [&](int group) {
        const auto t = clock::now();
        times[group].push_back(std::chrono::duration<double, std::micro>(t - t0).count());
        t0 = t;
    };
    if constexpr (TIMED) t0 = clock::now();
    Single& a = m.single;
    const Params& p = m.p;
    const Kernels& k = m.k;
    const int units = std::min(m.workers.slots(), 2);
    std::memcpy(a.x, image, IMG * sizeof(float));
    m.workers.run(units, [&](int u, int) {
        k.conv1_pool(p[W1].data(), p[B1].data(), a.x, u * C1 / units, (u + 1) * C1 / units, a.conv1, a.pool1, nullptr);
    });
    if constexpr (TIMED) lap(0);
    m.workers.run(units, [&](int u, int) {
        k.conv2_pool(p[W2].data(), p[B2].data(), a.pool1, u * C2 / units, (u + 1) * C2 / units, a.conv2, a.flat, nullptr);
    });
    if constexpr (TIMED) lap(1);
    m.workers.run(units, [&](int u, int) {
        k.fc1_relu(p[F1].data(), p[FB1].data(), a.flat, u * HID / units, (u + 1) * HID / units, a.hidden);
    });
    if constexpr (TIMED) lap(2);
    k.fc2(p[F2].data(), p[FB2].data(), a.hidden, 0, OUT, logits);
    if constexpr (TIMED) lap(3);
}

// Every row of y (rows, cols) = bias.
void fill_rows(float* y, int rows, int cols, const float* bias) {
    for (int r = 0; r < rows; ++r) std::copy(bias, bias + cols, y + size_t(r) * cols);
}

}  // namespace

void gemm(bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float beta, float* c) {
    scipy_cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
                      1.0f, a, ta ? m : k, b, tb ? k : n, beta, c, n);
}


void Net::forward_one(const float* x, float* logits) { one_image<false>(*this, x, logits, nullptr); }

void Net::time_one(const float* x, int repeats, std::vector<double> times[GROUPS]) {
    float logits[OUT];
    for (int g = 0; g < GROUPS; ++g) times[g].reserve(times[g].size() + repeats);
    for (int r = 0; r < repeats; ++r) one_image<true>(*this, x, logits, times);
}

void Net::predict(const float* x, int n, float* logits) {
    if (n <= SMALL) {
        for (int b = 0; b < n; ++b) forward_one(x + size_t(b) * IMG, logits + size_t(b) * OUT);
        return;
    }
    const int w = share_count(n);
    if (shares.size() < size_t(w)) shares.resize(w);
    workers.run(w, [&](int t, int) {
        for (int b = n * t / w, end = n * (t + 1) / w; b < end; b += CHUNK)
            forward_chunk(shares[t], x + size_t(b) * IMG, std::min(CHUNK, end - b), logits + size_t(b) * OUT);
    });
}

void Net::forward_chunk(Share& s, const float* x, int n, float* logits) {
    uint8_t* arg1 = grown(s.arg1, size_t(n) * POOL1);           // first max of each pool window
    uint8_t* arg2 = grown(s.arg2, size_t(n) * FLAT);
    float* pool1 = grown(s.pool1, size_t(n) * POOL1S);          // n, 20, 12, 12 (+ slack)
    float* flat = grown(s.flat, size_t(n) * FLAT);              // n, 800 = pool2 in (c, h, w) order
    float* relu = grown(s.relu, size_t(n) * HID);               // n, 500
    for (int b = 0; b < n; ++b) {
        std::memcpy(s.xpad.data(), x + size_t(b) * IMG, IMG * sizeof(float));
        k.conv1_pool(p[W1].data(), p[B1].data(), s.xpad.data(), 0, C1, s.conv1.data(), pool1 + size_t(b) * POOL1S,
                     arg1 + size_t(b) * POOL1);
        k.conv2_pool(p[W2].data(), p[B2].data(), pool1 + size_t(b) * POOL1S, 0, C2, s.conv2.data(),
                     flat + size_t(b) * FLAT, arg2 + size_t(b) * FLAT);
    }
    fill_rows(relu, n, HID, p[FB1].data());                                         // fc1 + ReLU
    gemm(false, true, n, HID, FLAT, flat, p[F1].data(), 1.0f, relu);
    for (size_t i = 0; i < size_t(n) * HID; ++i) relu[i] = std::max(relu[i], 0.0f);
    fill_rows(logits, n, OUT, p[FB2].data());                                       // fc2
    gemm(false, true, n, OUT, HID, relu, p[F2].data(), 1.0f, logits);
}

}  // namespace lenet::cblas
