// cblas backend: training, one plain SGD step on the mean softmax cross-entropy (cblas_impl.h).
// Per chunk of at most CHUNK images, after forward_chunk: the loss and the fc2 gradients on the
// calling thread (small); the ReLU's gradient and its nonzeros (about half) by image, in parts()
// units of images; fc1's data gradient over them, one unit of its rows per thread (the rows that
// thread multiplies forward and updates, so that fc1's weight lines stay on its core; csrc/NOTES.md
// v23), each into its own share; then, in one run of the workers, the convolutions' backward (groups
// of images, each with its own gradient sums, the shares summed per image: the result does not
// depend on which worker ran what) beside fc1's weight gradient over the nonzeros in parts() units
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

// dhid (images [b0, b1) of (n, HID)) *= the ReLU's gradient (hid > 0; a select: half are zero, at
// random, so a branch would mispredict), and each image's nonzeros in `nz` (by image, in order).
void relu_nonzeros(const float* hid, float* dhid, int b0, int b1, Nonzeros& nz) {
    for (int b = b0; b < b1; ++b) {
        const size_t row = size_t(b) * HID;
        for (int j = 0; j < HID; ++j) dhid[row + j] = hid[row + j] > 0 ? dhid[row + j] : 0.0f;
        int n = 0;
        for (int j = 0; j < HID; ++j) {   // apart: in one loop, GCC turned the select back into a branch
            nz.idx[row + n] = j, nz.val[row + n] = dhid[row + j];
            n += dhid[row + j] != 0;
        }
        nz.count[b] = n;
    }
}

// The nonzeros of fc1's rows (hidden units) [r0, r1) over the first n images, by row (`by_row`,
// CHUNK per row), from the same by image.
void rows_of(const Nonzeros& by_image, int n, int r0, int r1, Nonzeros& by_row) {
    std::fill(by_row.count.begin() + r0, by_row.count.begin() + r1, 0);
    for (int b = 0; b < n; ++b) {
        const int* idx = by_image.idx.data() + size_t(b) * HID;
        const int count = by_image.count[b];
        for (int k = int(std::lower_bound(idx, idx + count, r0) - idx); k < count && idx[k] < r1; ++k) {
            const size_t e = size_t(idx[k]) * CHUNK + by_row.count[idx[k]]++;
            by_row.idx[e] = b, by_row.val[e] = by_image.val[size_t(b) * HID + k];
        }
    }
}

// What unit `unit` of the backward's run of groups + parts units does: image group u (u < groups)
// or fc1's rows part u - groups. The caller claims from the front: the first half of the image
// groups (the images it ran forward), then the first half of fc1's rows (those it multiplied);
// helpers from the end, the second halves (csrc/NOTES.md v22).
int backward_task(int unit, int groups, int parts) {
    const int front_groups = groups / 2, front = front_groups + parts / 2;
    if (unit < front_groups) return unit;
    if (unit < front) return groups + unit - front_groups;
    const int from_end = groups + parts - 1 - unit, end_groups = groups - front_groups;
    return from_end < end_groups ? front_groups + from_end : groups + parts / 2 + from_end - end_groups;
}

// p -= lr * g over n floats
void sgd(float* p, const float* g, size_t n, float lr) {
    for (size_t k = 0; k < n; ++k) p[k] -= lr * g[k];
}

}  // namespace

double Net::train_step(const float* x, const int32_t* labels, int n, float lr) {
    single_stale = true;   // the step changes fc1's and fc2's weights
    Batch& a = batch_buffers();
    const int parts = this->parts();
    if (a.conv.size() < size_t(std::min(parts, CHUNK))) a.conv.resize(std::min(parts, CHUNK));
    const int shares = workers.slots();              // fc1's data gradient: one share per thread
    a.dflat.resize(size_t(shares) * CHUNK * FLAT);
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
        workers.run(parts, [&](int u, int) {                          // ReLU, by images
            relu_nonzeros(a.hid.data(), dhid, u * cn / parts, (u + 1) * cn / parts, a.by_image);
        });
        add_col_sums(dhid, cn, HID, a.fb1.data());
        const Nonzeros& nz = a.by_image;
        workers.run(shares, [&](int u, int) {       // fc1's data gradient, by rows: the forward's, the update's
            const int r0 = u * HID / shares, r1 = (u + 1) * HID / shares;
            int begin[CHUNK], end[CHUNK];           // each image's nonzeros among these rows
            for (int b = 0; b < cn; ++b) {
                const int *idx = nz.idx.data() + size_t(b) * HID, *last = idx + nz.count[b];
                const int* from = std::lower_bound(idx, last, r0);
                begin[b] = int(from - idx), end[b] = int(std::lower_bound(from, last, r1) - idx);
            }
            k.sparse_rows(p[F1].data(), FLAT, nz.idx.data(), nz.val.data(), begin, end, HID, 0, cn, 0, FLAT, 1, false,
                          a.dflat.data() + size_t(u) * CHUNK * FLAT, FLAT);
        });
        const int groups = std::min(cn, parts);
        workers.run(groups + parts, [&](int unit, int slot) {
            const int u = backward_task(unit, groups, parts);
            if (u < groups) {                                          // conv2, pool1, conv1 backward
                Scratch& s = scratch[slot];
                ConvGrads& g = a.conv[u];
                for (int b = u * cn / groups; b < (u + 1) * cn / groups; ++b) {
                    const float* dflat = a.dflat.data() + size_t(b) * FLAT;   // the shares summed
                    if (shares > 1) {
                        std::memcpy(s.dflat.data(), dflat, FLAT * sizeof(float));
                        for (int h = 1; h < shares; ++h)
                            for (int j = 0; j < FLAT; ++j) s.dflat[j] += dflat[size_t(h) * CHUNK * FLAT + j];
                        dflat = s.dflat.data();
                    }
                    k.conv2_backward(p[W2].data(), a.pool1.data() + size_t(b) * POOL1S, dflat,
                                     a.arg2.data() + size_t(b) * FLAT, g.w2.data(), g.b2.data(), s.dpool1.data(),
                                     s.back.data());
                    std::memcpy(s.x.data(), x + size_t(c0 + b) * IMG, IMG * sizeof(float));
                    k.conv1_backward(s.x.data(), s.dpool1.data(), a.arg1.data() + size_t(b) * POOL1, g.w1.data(),
                                     g.b1.data());
                }
                return;
            }
            const int r0 = (u - groups) * HID / parts, r1 = (u - groups + 1) * HID / parts;   // fc1, by rows
            rows_of(a.by_image, cn, r0, r1, a.by_unit);
            const Nonzeros& rows = a.by_unit;
            auto weight_gradient = [&](float* y, float alpha, bool add) {
                k.sparse_rows(a.flat.data(), FLAT, rows.idx.data(), rows.val.data(), nullptr, rows.count.data(), CHUNK,
                              r0, r1, 0, FLAT, alpha, add, y, FLAT);
            };
            if (!chunked) {                                            // SGD straight into the weights
                weight_gradient(p[F1].data(), -lr, true);
                return;
            }
            weight_gradient(a.f1.data(), 1, c0 > 0);
            if (last) sgd(p[F1].data() + size_t(r0) * FLAT, a.f1.data() + size_t(r0) * FLAT, size_t(r1 - r0) * FLAT, lr);
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
