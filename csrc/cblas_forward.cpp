// cblas backend: the forward pass (cblas_impl.h), run by the workers (cblas_workers.h).
// One image: three groups (conv1+pool1, conv2+pool2, fc1+ReLU+fc2), each split into two units of
// half the output channels / rows; each group reads all of the previous one; each fc1 unit also
// multiplies its rows' outputs into fc2 and the calling thread adds the two shares (fc2's inputs
// never cross cores). Batches of more than SMALL images, CHUNK at a time: the convolutions one
// image per unit, then fc1 in parts() units of its rows (each unit reads only its share of the
// 1.6 MB of weights), then fc2 on the calling thread.
#include <chrono>
#include <cstring>

#include <cblas.h>

#include "cblas_impl.h"

namespace lenet::cblas {
namespace {

// The single-image forward; with TIMED, each group's wall time (µs) is appended to times[group],
// and to starts, for each group whose second unit a helper took, how long after the group began it
// started on it (a separate instantiation: the untimed path has no clock reads).
template <bool TIMED>
void one_image(Net& m, const float* image, float* logits, std::vector<double>* times, std::vector<double>* starts) {
    using clock = std::chrono::steady_clock;
    using us = std::chrono::duration<double, std::micro>;
    [[maybe_unused]] clock::time_point t0;
    [[maybe_unused]] auto lap = [&](int group) {
        const auto t = clock::now();
        times[group].push_back(us(t - t0).count());
        t0 = t;
    };
    // on a helper (slot > 0); the caller touches t0 and starts only before and after the group's run
    [[maybe_unused]] auto started = [&](int slot) {
        if (slot > 0) starts->push_back(us(clock::now() - t0).count());
    };
    if constexpr (TIMED) t0 = clock::now();
    Single& a = m.single;
    const Params& p = m.p;
    const Kernels& k = m.k;
    const int units = std::min(m.workers.slots(), 2);
    m.workers.run(units, [&](int u, int slot) {
        if constexpr (TIMED) started(slot);
        float* x = a.x[u];   // each unit pads its own copy: none of its lines crosses cores
        std::memcpy(x, image, IMG * sizeof(float));
        k.conv1_pool(p[W1].data(), p[B1].data(), x, u * C1 / units, (u + 1) * C1 / units, a.conv1, a.pool1, nullptr);
    });
    if constexpr (TIMED) lap(0);
    m.workers.run(units, [&](int u, int slot) {
        if constexpr (TIMED) started(slot);
        k.conv2_pool(p[W2].data(), p[B2].data(), a.pool1, u * C2 / units, (u + 1) * C2 / units, a.conv2[u], a.flat,
                     nullptr);
    });
    if constexpr (TIMED) lap(1);
    float part[2][OUT];   // each unit's share of fc2: its rows of fc1 are its inputs of fc2
    m.workers.run(units, [&](int u, int slot) {
        if constexpr (TIMED) started(slot);
        const int r0 = u * HID / units, r1 = (u + 1) * HID / units;
        k.fc1_relu(p[F1].data(), p[FB1].data(), a.flat, 1, r0, r1, a.hidden);
        k.fc2_part(p[F2].data(), a.hidden, r0, r1, part[u]);
    });
    for (int o = 0; o < OUT; ++o) logits[o] = p[FB2][o] + part[0][o] + (units > 1 ? part[1][o] : 0.0f);
    if constexpr (TIMED) lap(2);
}

}  // namespace

void gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda, const float* b, int ldb,
          float beta, float* c, int ldc) {
    scipy_cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha,
                      a, lda, b, ldb, beta, c, ldc);
}

void Net::forward_one(const float* x, float* logits) { one_image<false>(*this, x, logits, nullptr, nullptr); }

void Net::time_one(const float* x, int repeats, std::vector<double> times[GROUPS], std::vector<double>& starts) {
    float logits[OUT];
    for (int g = 0; g < GROUPS; ++g) times[g].reserve(times[g].size() + repeats);
    starts.reserve(starts.size() + size_t(GROUPS) * repeats);   // no allocation on a helper
    for (int r = 0; r < repeats; ++r) one_image<true>(*this, x, logits, times, &starts);
}

Batch& Net::batch_buffers() {
    if (!batch) {
        batch = std::make_unique<Batch>();
        scratch.resize(workers.slots());
    }
    return *batch;
}

void Net::predict(const float* x, int n, float* logits) {
    if (n <= SMALL) {
        for (int b = 0; b < n; ++b) forward_one(x + size_t(b) * IMG, logits + size_t(b) * OUT);
        return;
    }
    for (int b = 0; b < n; b += CHUNK)
        forward_chunk(x + size_t(b) * IMG, std::min(CHUNK, n - b), logits + size_t(b) * OUT, false);
}

void Net::forward_chunk(const float* x, int n, float* logits, bool train) {
    Batch& a = batch_buffers();
    workers.run(n, [&](int b, int slot) {                              // conv1+pool1, conv2+pool2
        Scratch& s = scratch[slot];
        float* pool1 = a.pool1.data() + size_t(b) * POOL1S;
        std::memcpy(s.x.data(), x + size_t(b) * IMG, IMG * sizeof(float));
        k.conv1_pool(p[W1].data(), p[B1].data(), s.x.data(), 0, C1, s.conv1.data(), pool1,
                     train ? a.arg1.data() + size_t(b) * POOL1 : nullptr);
        k.conv2_pool(p[W2].data(), p[B2].data(), pool1, 0, C2, s.conv2.data(), a.flat.data() + size_t(b) * FLAT,
                     train ? a.arg2.data() + size_t(b) * FLAT : nullptr);
    });
    const int parts = std::min(this->parts(), HID / 4);
    workers.run(parts, [&](int u, int) {                               // fc1 + ReLU, by rows
        k.fc1_relu(p[F1].data(), p[FB1].data(), a.flat.data(), n, u * HID / parts, (u + 1) * HID / parts, a.hid.data());
    });
    k.fc2(p[F2].data(), p[FB2].data(), a.hid.data(), n, 0, OUT, logits);   // fc2
}

}  // namespace lenet::cblas
