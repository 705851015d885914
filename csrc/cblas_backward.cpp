// cblas backend: training, one plain SGD step on the mean softmax cross-entropy (cblas_impl.h).
// Per chunk of at most CHUNK images, after forward_chunk: the loss and the fc2 gradients on the
// calling thread (small); fc1's data gradient in parts() units of its columns; then, in one run
// of the workers, the convolutions' backward (groups of images, each with its own gradient sums:
// the result does not depend on which worker ran what) beside fc1's weight gradient in parts() units
// of its rows, which also apply it (SGD) on the last chunk: nothing reads fc1's weights after that.
// Then the rest of the update on the calling thread.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "cblas_impl.h"

namespace lenet::cblas {
namespace {

// g (cols,) += column sums of d (rows, cols)
void add_col_sums(const float* d, int rows, int cols, float* g) {
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) g[c] += d[size_t(r) * cols + c];
}

// dlogits (n, 10) = (softmax(logits) - onehot(labels)) / total: the gradient of the batch-mean
// loss (batch size total); returns the summed loss of these n images.
double softmax_cross_entropy(const float* logits, const int32_t* labels, int n, int total, float* dlogits) {
    double loss = 0;
    for (int b = 0; b < n; ++b) {
        const float* z = logits + b * OUT;
        const float zmax = *std::max_element(z, z + OUT);
        double sum = 0;
        for (int k = 0; k < OUT; ++k) sum += std::exp(double(z[k]) - zmax);
        loss += std::log(sum) - (double(z[labels[b]]) - zmax);
        for (int k = 0; k < OUT; ++k)
            dlogits[b * OUT + k] = float((std::exp(double(z[k]) - zmax) / sum - (k == labels[b])) / total);
    }
    return loss;
}

// p -= lr * g over n floats
void sgd(float* p, const float* g, size_t n, float lr) {
    for (size_t k = 0; k < n; ++k) p[k] -= lr * g[k];
}

}  // namespace

double Net::train_step(const float* x, const int32_t* labels, int n, float lr) {
    Batch& a = batch_buffers();
    const int parts = this->parts();
    if (a.conv.size() < size_t(std::min(parts, CHUNK))) a.conv.resize(std::min(parts, CHUNK));
    for (ConvGrads& g : a.conv)
        for (auto* v : {&g.w1, &g.b1, &g.w2, &g.b2}) std::fill(v->begin(), v->end(), 0.0f);
    for (auto* v : {&a.f2, &a.fb1, &a.fb2}) std::fill(v->begin(), v->end(), 0.0f);
    const bool chunked = n > CHUNK;                    // fc1's gradient summed over chunks, then applied
    if (chunked) a.f1.resize(size_t(HID) * FLAT);
    double loss = 0;
    for (int c0 = 0; c0 < n; c0 += CHUNK) {
        const int cn = std::min(CHUNK, n - c0);
        const bool last = c0 + cn == n;
        forward_chunk(x + size_t(c0) * IMG, cn, a.logits.data(), true);
        loss += softmax_cross_entropy(a.logits.data(), labels + c0, cn, n, a.dlogits.data());
        float* dhid = a.dhid.data();
        gemm(true, false, OUT, HID, cn, 1, a.dlogits.data(), OUT, a.hid.data(), HID, 1, a.f2.data(), HID);   // fc2
        add_col_sums(a.dlogits.data(), cn, OUT, a.fb2.data());
        gemm(false, false, cn, HID, OUT, 1, a.dlogits.data(), OUT, p[F2].data(), HID, 0, dhid, HID);
        for (size_t i = 0; i < size_t(cn) * HID; ++i)   // ReLU: a select (half are zero, at random: a branch mispredicts)
            dhid[i] = a.hid[i] > 0 ? dhid[i] : 0.0f;
        add_col_sums(dhid, cn, HID, a.fb1.data());
        workers.run(parts, [&](int u, int) {                          // fc1's data gradient, by columns
            const int c = u * FLAT / parts, cols = (u + 1) * FLAT / parts - c;
            gemm(false, false, cn, cols, HID, 1, dhid, HID, p[F1].data() + c, FLAT, 0, a.dflat.data() + c, FLAT);
        });
        const int groups = std::min(cn, parts);
        workers.run(groups + parts, [&](int u, int slot) {
            if (u < groups) {                                          // conv2, pool1, conv1 backward
                Scratch& s = scratch[slot];
                ConvGrads& g = a.conv[u];
                for (int b = u * cn / groups; b < (u + 1) * cn / groups; ++b) {
                    k.conv2_backward(p[W2].data(), a.pool1.data() + size_t(b) * POOL1S, a.dflat.data() + size_t(b) * FLAT,
                                     a.arg2.data() + size_t(b) * FLAT, g.w2.data(), g.b2.data(), s.dpool1.data(),
                                     s.back.data());
                    std::memcpy(s.x.data(), x + size_t(c0 + b) * IMG, IMG * sizeof(float));
                    k.conv1_backward(s.x.data(), s.dpool1.data(), a.arg1.data() + size_t(b) * POOL1, g.w1.data(),
                                     g.b1.data());
                }
                return;
            }
            const int r = (u - groups) * HID / parts, rs = (u - groups + 1) * HID / parts - r;   // fc1, by rows
            float* w = p[F1].data() + size_t(r) * FLAT;
            if (!chunked) {                                            // SGD straight into the weights
                gemm(true, false, rs, FLAT, cn, -lr, dhid + r, HID, a.flat.data(), FLAT, 1, w, FLAT);
                return;
            }
            float* g = a.f1.data() + size_t(r) * FLAT;
            gemm(true, false, rs, FLAT, cn, 1, dhid + r, HID, a.flat.data(), FLAT, c0 ? 1 : 0, g, FLAT);
            if (last) sgd(w, g, size_t(rs) * FLAT, lr);
        });
    }
    for (size_t i = 1; i < a.conv.size(); ++i)                         // the rest of the update
        for (auto [sum, part] : {std::pair{&a.conv[0].w1, &a.conv[i].w1}, {&a.conv[0].b1, &a.conv[i].b1},
                                 {&a.conv[0].w2, &a.conv[i].w2}, {&a.conv[0].b2, &a.conv[i].b2}})
            for (size_t k = 0; k < sum->size(); ++k) (*sum)[k] += (*part)[k];
    sgd(p[W1].data(), a.conv[0].w1.data(), stored(W1), lr);
    sgd(p[B1].data(), a.conv[0].b1.data(), C1, lr);
    sgd(p[W2].data(), a.conv[0].w2.data(), stored(W2), lr);
    sgd(p[B2].data(), a.conv[0].b2.data(), C2, lr);
    sgd(p[F2].data(), a.f2.data(), size_t(OUT) * HID, lr);
    sgd(p[FB2].data(), a.fb2.data(), OUT, lr);
    sgd(p[FB1].data(), a.fb1.data(), HID, lr);
    return loss / n;
}

}  // namespace lenet::cblas
