// cblas backend (cpu): LeNet forward, backward and plain SGD in C++ (DESIGN.md §1).
// Convolutions are im2col + cblas_sgemm one image at a time (its working set stays in L2: on a
// Zen 4 core that ran 2-5x faster than one GEMM over a 64-image batch); the dense layers are one
// sgemm per chunk of images; max-pool, ReLU and softmax cross-entropy are loops.
//   conv:  Y (O, P) = W (O, C*K*K) · cols (C*K*K, P)      per image, P = OH*OW output pixels
//   dense: Y (N, out) = X (N, in) · Wᵀ (in, out)
// OpenBLAS runs single-threaded; the parallelism is ours: a batch of more than SMALL images is
// split into contiguous ranges, one Worker thread each (own scratch and gradient sums, added up
// before the SGD update), each range in chunks of at most CHUNK images (bounded memory).
#include <cblas.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "arrays.h"

namespace py = pybind11;

namespace {

constexpr int K = 5, KK = K * K;                   // conv kernel 5x5, stride 1, no padding
constexpr int S0 = 28, C1 = 20, S1 = 24, Q1 = 12;  // 1x28x28 -conv1-> 20x24x24 -pool-> 20x12x12
constexpr int C2 = 50, S2 = 8, Q2 = 4;             //          -conv2-> 50x8x8   -pool-> 50x4x4
constexpr int IMG = S0 * S0, P1 = S1 * S1, P2 = S2 * S2, POOL1 = C1 * Q1 * Q1;
constexpr int FLAT = C2 * Q2 * Q2, HID = 500, OUT = 10;
constexpr int CHUNK = 64;
constexpr int SMALL = 4;   // batches up to this size run on one thread
const int BLAS_THREADS = scipy_openblas_get_num_threads();   // OpenBLAS's default, read at load

enum { W1, B1, W2, B2, F1, FB1, F2, FB2, NPARAM };
const char* const NAMES[NPARAM] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                   "fc1.weight",   "fc1.bias",   "fc2.weight",   "fc2.bias"};

template <class T>
T* grown(std::vector<T>& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
}

// C (m, n) = beta·C + op(A) (m, k) · op(B) (k, n), row-major.
void gemm(bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float beta, float* c) {
    scipy_cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
                      1.0f, a, ta ? m : k, b, tb ? k : n, beta, c, n);
}

// Every row r of y (rows, cols) = bias[r] (conv, per channel) or every row = bias (dense).
void fill_rows(float* y, int rows, int cols, const float* bias, bool per_row) {
    for (int r = 0; r < rows; ++r)
        if (per_row) std::fill(y + size_t(r) * cols, y + size_t(r + 1) * cols, bias[r]);
        else std::copy(bias, bias + cols, y + size_t(r) * cols);
}

// g (rows,) (+)= row sums of d (rows, cols)   /   g (cols,) (+)= column sums
void row_sums(const float* d, int rows, int cols, float* g, bool add) {
    for (int r = 0; r < rows; ++r) {
        double s = 0;
        for (int c = 0; c < cols; ++c) s += d[size_t(r) * cols + c];
        g[r] = float((add ? g[r] : 0) + s);
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

// Max-pool 2x2/2 of one image: x (C, S, S) -> y (C, S/2, S/2); arg records the first maximum
// of each window in row-major order (0..3).
template <int C, int S>
void maxpool(const float* x, float* y, uint8_t* arg) {
    constexpr int Q = S / 2;
    for (int c = 0; c < C; ++c)
        for (int ph = 0; ph < Q; ++ph)
            for (int pw = 0; pw < Q; ++pw) {
                const float* w = x + (c * S + 2 * ph) * S + 2 * pw;
                const float v[4] = {w[0], w[1], w[S], w[S + 1]};
                int best = 0;
                for (int k = 1; k < 4; ++k)
                    if (v[k] > v[best]) best = k;
                y[(c * Q + ph) * Q + pw] = v[best];
                arg[(c * Q + ph) * Q + pw] = uint8_t(best);
            }
}

// dx (C, S, S): each dy (C, S/2, S/2) goes to the recorded maximum of its window.
template <int C, int S>
void maxpool_backward(const float* dy, const uint8_t* arg, float* dx) {
    constexpr int Q = S / 2;
    std::fill(dx, dx + C * S * S, 0.0f);
    for (int q = 0; q < C * Q * Q; ++q) {
        const int c = q / (Q * Q), ph = q / Q % Q, pw = q % Q, k = arg[q];
        dx[(c * S + 2 * ph + k / 2) * S + 2 * pw + k % 2] = dy[q];
    }
}

using Params = std::vector<float>[NPARAM];

// One thread's share of a batch: forward and backward over a chunk of images, with its own
// per-image conv scratch (stays in L2), per-chunk activations and gradient sums.
class Worker {
public:
    std::vector<float> g[NPARAM];                                  // gradient sums, canonical layouts

    // x (n, 1, 28, 28) -> logits (n, 10), keeping what backward needs.
    void forward(const Params& p, const float* x, int n, float* logits) {
        uint8_t* arg1 = grown(arg1_, size_t(n) * POOL1);           // first max of each pool window
        uint8_t* arg2 = grown(arg2_, size_t(n) * FLAT);
        float* pool1 = grown(pool1_, size_t(n) * POOL1);           // n, 20, 12, 12
        float* flat = grown(flat_, size_t(n) * FLAT);              // n, 800 = pool2 in (c, h, w) order
        float* relu = grown(relu_, size_t(n) * HID);               // n, 500
        for (int b = 0; b < n; ++b) {
            im2col<1, S0>(x + size_t(b) * IMG, cols1_.data());                         // 25, 576
            fill_rows(conv1_.data(), C1, P1, p[B1].data(), true);                      // 20, 24x24
            gemm(false, false, C1, P1, KK, p[W1].data(), cols1_.data(), 1.0f, conv1_.data());
            maxpool<C1, S1>(conv1_.data(), pool1 + size_t(b) * POOL1, arg1 + size_t(b) * POOL1);
            im2col<C1, Q1>(pool1 + size_t(b) * POOL1, cols2_.data());                  // 500, 64
            fill_rows(conv2_.data(), C2, P2, p[B2].data(), true);                      // 50, 8x8
            gemm(false, false, C2, P2, C1 * KK, p[W2].data(), cols2_.data(), 1.0f, conv2_.data());
            maxpool<C2, S2>(conv2_.data(), flat + size_t(b) * FLAT, arg2 + size_t(b) * FLAT);
        }
        fill_rows(relu, n, HID, p[FB1].data(), false);                                  // fc1 + ReLU
        gemm(false, true, n, HID, FLAT, flat, p[F1].data(), 1.0f, relu);
        for (size_t k = 0; k < size_t(n) * HID; ++k) relu[k] = std::max(relu[k], 0.0f);
        fill_rows(logits, n, OUT, p[FB2].data(), false);                                // fc2
        gemm(false, true, n, OUT, HID, relu, p[F2].data(), 1.0f, logits);
    }

    // After forward(p, x, n, logits): this chunk's share of the gradient of the batch-mean loss
    // (batch size `total`) into g, added to it if `add`; returns the chunk's summed loss.
    double backward(const Params& p, const float* x, const float* logits, const int32_t* labels, int n, int total,
                    bool add) {
        for (int i = 0; i < NPARAM; ++i) g[i].resize(p[i].size());
        const float beta = add ? 1.0f : 0.0f;
        float* dlogits = grown(dlogits_, size_t(n) * OUT);         // n, 10
        float* dh = grown(dh_, size_t(n) * HID);                   // n, 500
        float* dflat = grown(dflat_, size_t(n) * FLAT);            // n, 800
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
        gemm(true, false, OUT, HID, n, dlogits, relu_.data(), beta, g[F2].data());         // fc2
        col_sums(dlogits, n, OUT, g[FB2].data(), add);
        gemm(false, false, n, HID, OUT, dlogits, p[F2].data(), 0.0f, dh);
        for (size_t k = 0; k < size_t(n) * HID; ++k)                                         // ReLU
            if (relu_[k] <= 0) dh[k] = 0;
        gemm(true, false, HID, FLAT, n, dh, flat_.data(), beta, g[F1].data());              // fc1
        col_sums(dh, n, HID, g[FB1].data(), add);
        gemm(false, false, n, FLAT, HID, dh, p[F1].data(), 0.0f, dflat);
        for (int b = 0; b < n; ++b) {                                                        // per image
            const bool acc = add || b > 0;                         // add to the sums so far
            maxpool_backward<C2, S2>(dflat + size_t(b) * FLAT, arg2_.data() + size_t(b) * FLAT, dconv2_.data());
            im2col<C1, Q1>(pool1_.data() + size_t(b) * POOL1, cols2_.data());      // recomputed
            gemm(false, true, C2, C1 * KK, P2, dconv2_.data(), cols2_.data(), acc ? 1.0f : 0.0f, g[W2].data());    // conv2
            row_sums(dconv2_.data(), C2, P2, g[B2].data(), acc);
            gemm(true, false, C1 * KK, P2, C2, p[W2].data(), dconv2_.data(), 0.0f, dcols2_.data());
            col2im<C1, Q1>(dcols2_.data(), dpool1_.data());
            maxpool_backward<C1, S1>(dpool1_.data(), arg1_.data() + size_t(b) * POOL1, dconv1_.data());  // pool1
            im2col<1, S0>(x + size_t(b) * IMG, cols1_.data());                     // recomputed
            gemm(false, true, C1, KK, P1, dconv1_.data(), cols1_.data(), acc ? 1.0f : 0.0f, g[W1].data());        // conv1
            row_sums(dconv1_.data(), C1, P1, g[B1].data(), acc);
        }
        return loss;
    }

private:
    std::vector<float> cols1_ = std::vector<float>(KK * P1), conv1_ = std::vector<float>(C1 * P1);   // per image
    std::vector<float> cols2_ = std::vector<float>(C1 * KK * P2), conv2_ = std::vector<float>(C2 * P2);
    std::vector<float> dconv2_ = std::vector<float>(C2 * P2), dcols2_ = std::vector<float>(C1 * KK * P2);
    std::vector<float> dpool1_ = std::vector<float>(POOL1), dconv1_ = std::vector<float>(C1 * P1);
    std::vector<float> pool1_, flat_, relu_, dlogits_, dh_, dflat_;                               // per chunk
    std::vector<uint8_t> arg1_, arg2_;
};

class CpuNet {
public:
    // threads: workers for batches of more than SMALL images (0: OpenBLAS's default count)
    CpuNet(const py::object& params, int threads) : threads_(threads > 0 ? threads : std::max(BLAS_THREADS, 1)) {
        if (threads < 0 || threads > 256) throw py::value_error("threads: expected 0 (OpenBLAS default) to 256");
        if (!py::isinstance<py::dict>(params)) throw py::value_error("params: expected a dict of float32 arrays");
        auto d = py::reinterpret_borrow<py::dict>(params);
        for (auto item : d) {
            const std::string key = py::str(item.first);
            if (std::find(NAMES, NAMES + NPARAM, key) == NAMES + NPARAM)
                throw py::value_error("params: unexpected tensor '" + key + "'");
        }
        load(d, W1, {C1, 1, K, K}), load(d, B1, {C1});
        load(d, W2, {C2, C1, K, K}), load(d, B2, {C2});
        load(d, F1, {HID, FLAT}), load(d, FB1, {HID});
        load(d, F2, {OUT, HID}), load(d, FB2, {OUT});
    }

    // images (N, 1, 28, 28) float32 -> logits (N, 10) float32
    py::array_t<float> predict(const py::object& images) {
        auto x = lenet::checked_f32(images, "images", {-1, 1, S0, S0});
        const int n = int(x.shape(0));
        py::array_t<float> logits({py::ssize_t(n), py::ssize_t(OUT)});
        const float* xp = x.data();
        float* out = logits.mutable_data();
        {
            py::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lock(mu_);
            for_chunks(n, [&](Worker& w, int b, int m) { w.forward(p_, xp + size_t(b) * IMG, m, out + size_t(b) * OUT); });
        }
        return logits;
    }

    // One SGD step on the mean softmax cross-entropy of (images, labels); returns the loss.
    double train_step(const py::object& images, const py::object& labels, double lr) {
        auto x = lenet::checked_f32(images, "images", {-1, 1, S0, S0});
        const int n = int(x.shape(0));
        auto y = lenet::checked_labels(labels, "labels", n);
        if (!std::isfinite(lr) || lr <= 0) throw py::value_error("lr: expected a positive finite number");
        const float* xp = x.data();
        const int32_t* yp = y.data();
        double loss = 0;
        {
            py::gil_scoped_release nogil;
            std::lock_guard<std::mutex> lock(mu_);
            std::vector<float> logits(size_t(n) * OUT);
            std::vector<double> losses(workers(n), 0.0);
            std::vector<int> started(workers(n), -1);              // each worker's first image
            for_chunks(n, [&](Worker& w, int b, int m) {
                const size_t t = &w - workers_.data();
                if (started[t] < 0) started[t] = b;
                w.forward(p_, xp + size_t(b) * IMG, m, logits.data() + size_t(b) * OUT);
                losses[t] += w.backward(p_, xp + size_t(b) * IMG, logits.data() + size_t(b) * OUT, yp + b, m, n,
                                        b > started[t]);
            });
            for (int i = 0; i < NPARAM; ++i) {                     // the workers' sums, then plain SGD
                std::vector<float>& g = workers_[0].g[i];
                for (int t = 1; t < workers(n); ++t)
                    for (size_t k = 0; k < g.size(); ++k) g[k] += workers_[t].g[i][k];
                for (size_t k = 0; k < g.size(); ++k) p_[i][k] -= float(lr) * g[k];
            }
            for (double l : losses) loss += l;
        }
        return loss / n;
    }

    // {name: float32 array}, canonical layouts, copies
    py::dict parameters() {
        py::dict out;
        std::lock_guard<std::mutex> lock(mu_);
        for (int i = 0; i < NPARAM; ++i) {
            py::array_t<float> a(shape_[i]);
            std::copy(p_[i].begin(), p_[i].end(), a.mutable_data());
            out[NAMES[i]] = a;
        }
        return out;
    }

private:
    void load(const py::dict& d, int i, std::initializer_list<py::ssize_t> shape) {
        if (!d.contains(NAMES[i])) throw py::value_error(std::string("params: missing tensor '") + NAMES[i] + "'");
        auto a = lenet::checked_f32(d[NAMES[i]], NAMES[i], shape);
        p_[i].assign(a.data(), a.data() + a.size());
        shape_[i].assign(shape.begin(), shape.end());
    }

    int workers(int n) const { return n > SMALL ? std::min(threads_, n) : 1; }

    // f(worker, first image, count) over [0, n) in chunks of at most CHUNK images; the images
    // are split into workers(n) contiguous ranges, one thread each (run here if none can start).
    template <class F>
    void for_chunks(int n, F f) {
        const int w = workers(n);
        if (workers_.size() < size_t(w)) workers_.resize(w);
        scipy_openblas_set_num_threads(1);                         // the parallelism is ours
        auto range = [&](int t) {
            for (int b = n * t / w, end = n * (t + 1) / w; b < end; b += CHUNK) f(workers_[t], b, std::min(CHUNK, end - b));
        };
        std::vector<std::thread> threads;
        for (int t = 1; t < w; ++t) {
            try {
                threads.emplace_back(range, t);
            } catch (const std::system_error&) {
                range(t);
            }
        }
        range(0);
        for (auto& t : threads) t.join();
    }

    Params p_;                                                     // parameters, canonical layouts
    std::vector<py::ssize_t> shape_[NPARAM];
    std::vector<Worker> workers_;
    const int threads_;
    std::mutex mu_;                                                // one call at a time per net
};

}  // namespace

void bind_cblas(py::module_& m) {
    py::class_<CpuNet>(m, "CpuNet", "LeNet on the CPU: im2col + OpenBLAS sgemm, forward, backward and SGD")
        .def(py::init<const py::object&, int>(), py::arg("params"), py::arg("threads") = 0,
             "params: {name: float32 C-contiguous array} with the eight canonical tensors; threads: workers "
             "for batches of more than 4 images (0: OpenBLAS's default count; smaller batches use one)")
        .def("predict", &CpuNet::predict, py::arg("images"), "(N, 1, 28, 28) float32 -> (N, 10) float32 logits")
        .def("train_step", &CpuNet::train_step, py::arg("images"), py::arg("labels"), py::arg("lr"),
             "one SGD step on the mean softmax cross-entropy; labels int32 (N,) in [0, 10); returns the loss")
        .def("parameters", &CpuNet::parameters, "{name: float32 array}, canonical layouts (copies)");
    m.def("blas_config", [] { return std::string(scipy_openblas_get_config()); }, "the OpenBLAS build in use");
}
