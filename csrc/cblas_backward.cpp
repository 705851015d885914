// cblas backend: training, one plain SGD step on the mean softmax cross-entropy (cblas_impl.h).
// The batch is split into contiguous ranges, one unit (and one Share) each: forward and backward
// chunk by chunk, the gradient summed in the share; then the shares' sums and the update.
// Backward: the dense layers as sgemm per chunk, the convolutions per image through the pools'
// maxima only (cblas_kernels.h).
#include <cmath>
#include <cstring>

#include "cblas_impl.h"

namespace lenet::cblas {
namespace {

// g (cols,) (+)= column sums of d (rows, cols)
void col_sums(const float* d, int rows, int cols, float* g, bool add) {
    if (!add) std::fill(g, g + cols, 0.0f);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) g[c] += d[size_t(r) * cols + c];
}

// After forward_chunk(s, x, n, logits): this chunk's share of the gradient of the batch-mean loss
// (batch size `total`) into s.g, added to it if `add`; returns the chunk's summed loss.
double backward_chunk(const Params& p, const Kernels& kern, Share& s, const float* x, const float* logits,
                      const int32_t* labels, int n, int total, bool add) {
    auto& g = s.g;
    for (int i = 0; i < NUM_TENSORS; ++i) g[i].resize(p[i].size());
    if (!add)
        for (int i : {W1, B1, W2, B2}) std::fill(g[i].begin(), g[i].end(), 0.0f);
    const float beta = add ? 1.0f : 0.0f;
    float* dlogits = grown(s.dlogits, size_t(n) * OUT);        // n, 10
    float* dh = grown(s.dh, size_t(n) * HID);                  // n, 500
    float* dflat = grown(s.dflat, size_t(n) * FLAT);           // n, 800
    double loss = 0;                                           // softmax cross-entropy
    for (int b = 0; b < n; ++b) {
        const float* z = logits + b * OUT;
        const float zmax = *std::max_element(z, z + OUT);
        double sum = 0;
        for (int k = 0; k < OUT; ++k) sum += std::exp(double(z[k]) - zmax);
        loss += std::log(sum) - (double(z[labels[b]]) - zmax);
        for (int k = 0; k < OUT; ++k)
            dlogits[b * OUT + k] = float((std::exp(double(z[k]) - zmax) / sum - (k == labels[b])) / total);
    }
    gemm(true, false, OUT, HID, n, dlogits, s.relu.data(), beta, g[F2].data());         // fc2
    col_sums(dlogits, n, OUT, g[FB2].data(), add);
    gemm(false, false, n, HID, OUT, dlogits, p[F2].data(), 0.0f, dh);
    for (size_t k = 0; k < size_t(n) * HID; ++k)                                         // ReLU
        if (s.relu[k] <= 0) dh[k] = 0;
    gemm(true, false, HID, FLAT, n, dh, s.flat.data(), beta, g[F1].data());              // fc1
    col_sums(dh, n, HID, g[FB1].data(), add);
    gemm(false, false, n, FLAT, HID, dh, p[F1].data(), 0.0f, dflat);
    for (int b = 0; b < n; ++b) {                                                        // per image
        kern.conv2_backward(p[W2].data(), s.pool1.data() + size_t(b) * POOL1S, dflat + size_t(b) * FLAT,
                            s.arg2.data() + size_t(b) * FLAT, g[W2].data(), g[B2].data(), s.dpool1.data(),
                            s.scratch.data());
        std::memcpy(s.xpad.data(), x + size_t(b) * IMG, IMG * sizeof(float));
        kern.conv1_backward(s.xpad.data(), s.dpool1.data(), s.arg1.data() + size_t(b) * POOL1, g[W1].data(),
                            g[B1].data(), s.scratch.data());
    }
    return loss;
}

}  // namespace

double Net::train_step(const float* x, const int32_t* labels, int n, float lr) {
    const int w = share_count(n);
    if (shares.size() < size_t(w)) shares.resize(w);
    std::vector<float> logits(size_t(n) * OUT);
    std::vector<double> losses(w, 0.0);
    workers.run(w, [&](int t, int) {
        for (int b = n * t / w, end = n * (t + 1) / w; b < end; b += CHUNK) {
            const int c = std::min(CHUNK, end - b);
            forward_chunk(shares[t], x + size_t(b) * IMG, c, logits.data() + size_t(b) * OUT);
            losses[t] += backward_chunk(p, k, shares[t], x + size_t(b) * IMG, logits.data() + size_t(b) * OUT, labels + b,
                                        c, n, b > n * t / w);
        }
    });
    for (int i = 0; i < NUM_TENSORS; ++i) {                        // the shares' sums, then plain SGD
        std::vector<float>& g = shares[0].g[i];
        for (int t = 1; t < w; ++t)
            for (size_t k = 0; k < g.size(); ++k) g[k] += shares[t].g[i][k];
        for (size_t k = 0; k < g.size(); ++k) p[i][k] -= lr * g[k];
    }
    double loss = 0;
    for (double l : losses) loss += l;
    return loss / n;
}

}  // namespace lenet::cblas
