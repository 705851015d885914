// cblas backend: training, one plain SGD step on the mean softmax cross-entropy (cblas_impl.h).
// The batch is split into contiguous ranges, one unit (and one Share) each: forward and backward
// chunk by chunk, the gradient summed in the share; then the shares' sums and the update.
// Backward: im2col + cblas_sgemm per image for the convolutions, sgemm per chunk for the dense layers.
#include <cmath>
#include <cstring>

#include "cblas_impl.h"

namespace lenet::cblas {
namespace {

// g (rows,) (+)= row sums of d (rows, cols)   /   g (cols,) (+)= column sums
static_assert(P1 % 8 == 0 && P2 % 8 == 0, "row_sums sums eight columns at a time");
void row_sums(const float* d, int rows, int cols, float* g, bool add) {   // cols % 8 == 0
    for (int r = 0; r < rows; ++r) {
        double s[8] = {};                  // eight partial sums: no serial chain of dependent adds
        for (int c = 0; c < cols; c += 8)
            for (int k = 0; k < 8; ++k) s[k] += d[size_t(r) * cols + c + k];
        g[r] = float((add ? g[r] : 0) + (((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]))));
    }
}
void col_sums(const float* d, int rows, int cols, float* g, bool add) {
    if (!add) std::fill(g, g + cols, 0.0f);
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) g[c] += d[size_t(r) * cols + c];
}

// One image: src (C, S, S) -> cols (C*K*K, O*O), O = S-K+1; row (c, i, j), column (oh, ow).
template <int C, int S>   // compile-time sizes: the copies and loops unroll
void im2col(const float* src, float* cols) {
    constexpr int O = S - K + 1;
    for (int c = 0; c < C; ++c)
        for (int i = 0; i < K; ++i)
            for (int j = 0; j < K; ++j)
                for (int oh = 0; oh < O; ++oh)
                    std::memcpy(cols + ((c * K + i) * K + j) * O * O + oh * O, src + (c * S + oh + i) * S + j,
                                O * sizeof(float));
}

// Its adjoint: dsrc (C, S, S) = sum of dcols over the windows.
template <int C, int S>
void col2im(const float* dcols, float* dsrc) {
    constexpr int O = S - K + 1;
    std::fill(dsrc, dsrc + C * S * S, 0.0f);
    for (int c = 0; c < C; ++c)
        for (int i = 0; i < K; ++i)
            for (int j = 0; j < K; ++j)
                for (int oh = 0; oh < O; ++oh) {
                    const float* r = dcols + ((c * K + i) * K + j) * O * O + oh * O;
                    float* d = dsrc + (c * S + oh + i) * S + j;
                    for (int ow = 0; ow < O; ++ow) d[ow] += r[ow];
                }
}

// dx (C, S, S): each dy (C, S/2, S/2) goes to the recorded maximum of its window.
template <int C, int S>
void maxpool_backward(const float* dy, const uint8_t* arg, float* dx) {
    constexpr int Q = S / 2;
    std::fill(dx, dx + C * S * S, 0.0f);
    for (int c = 0; c < C; ++c)
        for (int ph = 0; ph < Q; ++ph)
            for (int pw = 0; pw < Q; ++pw) {
                const int q = (c * Q + ph) * Q + pw, k = arg[q];
                dx[(c * S + 2 * ph + (k >> 1)) * S + 2 * pw + (k & 1)] = dy[q];
            }
}

// After forward_chunk(s, x, n, logits): this chunk's share of the gradient of the batch-mean loss
// (batch size `total`) into s.g, added to it if `add`; returns the chunk's summed loss.
double backward_chunk(const Params& p, Share& s, const float* x, const float* logits, const int32_t* labels, int n,
                      int total, bool add) {
    for (int i = 0; i < NUM_TENSORS; ++i) s.g[i].resize(p[i].size());
    auto& g = s.g;
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
        const bool acc = add || b > 0;                         // add to the sums so far
        maxpool_backward<C2, S2>(dflat + size_t(b) * FLAT, s.arg2.data() + size_t(b) * FLAT, s.dconv2.data());
        im2col<C1, Q1>(s.pool1.data() + size_t(b) * POOL1, s.cols2.data());
        gemm(false, true, C2, C1 * KK, P2, s.dconv2.data(), s.cols2.data(), acc ? 1.0f : 0.0f, g[W2].data());  // conv2
        row_sums(s.dconv2.data(), C2, P2, g[B2].data(), acc);
        gemm(true, false, C1 * KK, P2, C2, p[W2].data(), s.dconv2.data(), 0.0f, s.dcols2.data());
        col2im<C1, Q1>(s.dcols2.data(), s.dpool1.data());
        maxpool_backward<C1, S1>(s.dpool1.data(), s.arg1.data() + size_t(b) * POOL1, s.dconv1.data());   // pool1
        im2col<1, S0>(x + size_t(b) * IMG, s.cols1.data());
        gemm(false, true, C1, KK, P1, s.dconv1.data(), s.cols1.data(), acc ? 1.0f : 0.0f, g[W1].data());      // conv1
        row_sums(s.dconv1.data(), C1, P1, g[B1].data(), acc);
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
            losses[t] += backward_chunk(p, shares[t], x + size_t(b) * IMG, logits.data() + size_t(b) * OUT, labels + b,
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
