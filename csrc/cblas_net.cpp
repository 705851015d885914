// cblas backend (cpu): LeNet forward, backward and plain SGD in C++ (DESIGN.md §1).
// Convolutions are im2col + one cblas_sgemm over a chunk of images, dense layers are sgemm,
// max-pool, ReLU and softmax cross-entropy are loops. Conv activations are stored channel-major
// over the batch, (C, N, H, W), so that each convolution is a single GEMM:
//   conv:  Y (O, N*P) = W (O, C*K*K) · cols (C*K*K, N*P)        P = OH*OW output pixels
//   dense: Y (N, out) = X (N, in) · Wᵀ (in, out)
// Batches run in chunks of at most CHUNK images (bounded scratch); training adds up the
// gradients of every chunk, then makes the one SGD update.
#include <cblas.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "arrays.h"

namespace py = pybind11;

namespace {

constexpr int K = 5, KK = K * K;                   // conv kernel 5x5, stride 1, no padding
constexpr int S0 = 28, C1 = 20, S1 = 24, Q1 = 12;  // 1x28x28 -conv1-> 20x24x24 -pool-> 20x12x12
constexpr int C2 = 50, S2 = 8, Q2 = 4;             //          -conv2-> 50x8x8   -pool-> 50x4x4
constexpr int FLAT = C2 * Q2 * Q2, HID = 500, OUT = 10;
constexpr int CHUNK = 64;
constexpr int SMALL = 4;   // chunks up to this many images run OpenBLAS on one thread
const int BLAS_THREADS = scipy_openblas_get_num_threads();   // OpenBLAS's own default, at load

enum { W1, B1, W2, B2, F1, FB1, F2, FB2, NPARAM };
const char* const NAMES[NPARAM] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                   "fc1.weight",   "fc1.bias",   "fc2.weight",   "fc2.bias"};

float* grown(std::vector<float>& v, size_t n) {
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

// src (C, n, S, S) -> cols (C*K*K, n*O*O), O = S-K+1; row (c, i, j), column (image, oh, ow).
void im2col(const float* src, int C, int n, int S, float* cols) {
    const int O = S - K + 1, np = n * O * O;
    for (int c = 0; c < C; ++c)
        for (int i = 0; i < K; ++i)
            for (int j = 0; j < K; ++j) {
                float* row = cols + size_t((c * K + i) * K + j) * np;
                for (int b = 0; b < n; ++b)
                    for (int oh = 0; oh < O; ++oh)
                        std::memcpy(row + (b * O + oh) * O, src + (size_t(c) * n + b) * S * S + (oh + i) * S + j,
                                    O * sizeof(float));
            }
}

// The adjoint of im2col: dsrc (C, n, S, S) = sum of dcols over the windows.
void col2im(const float* dcols, int C, int n, int S, float* dsrc) {
    const int O = S - K + 1, np = n * O * O;
    std::fill(dsrc, dsrc + size_t(C) * n * S * S, 0.0f);
    for (int c = 0; c < C; ++c)
        for (int i = 0; i < K; ++i)
            for (int j = 0; j < K; ++j) {
                const float* row = dcols + size_t((c * K + i) * K + j) * np;
                for (int b = 0; b < n; ++b)
                    for (int oh = 0; oh < O; ++oh) {
                        float* d = dsrc + (size_t(c) * n + b) * S * S + (oh + i) * S + j;
                        const float* r = row + (b * O + oh) * O;
                        for (int ow = 0; ow < O; ++ow) d[ow] += r[ow];
                    }
            }
}

// Max-pool 2x2/2: x (C, n, S, S) -> y[c*sc + b*sn + q], q = ph*(S/2)+pw; arg (C, n, S/2, S/2)
// records the first maximum of each window in row-major order (0..3).
void maxpool(const float* x, int C, int n, int S, float* y, size_t sc, size_t sn, uint8_t* arg) {
    const int Q = S / 2;
    for (int c = 0; c < C; ++c)
        for (int b = 0; b < n; ++b) {
            const float* xi = x + (size_t(c) * n + b) * S * S;
            uint8_t* ai = arg + (size_t(c) * n + b) * Q * Q;
            for (int ph = 0; ph < Q; ++ph)
                for (int pw = 0; pw < Q; ++pw) {
                    const float* w = xi + 2 * ph * S + 2 * pw;
                    const float v[4] = {w[0], w[1], w[S], w[S + 1]};
                    int best = 0;
                    for (int k = 1; k < 4; ++k)
                        if (v[k] > v[best]) best = k;
                    y[c * sc + b * sn + ph * Q + pw] = v[best];
                    ai[ph * Q + pw] = uint8_t(best);
                }
        }
}

// dx (C, n, S, S): each dy[c*sc + b*sn + q] goes to the recorded maximum of its window.
void maxpool_backward(const float* dy, int C, int n, int S, size_t sc, size_t sn, const uint8_t* arg, float* dx) {
    const int Q = S / 2;
    std::fill(dx, dx + size_t(C) * n * S * S, 0.0f);
    for (int c = 0; c < C; ++c)
        for (int b = 0; b < n; ++b) {
            float* dxi = dx + (size_t(c) * n + b) * S * S;
            const uint8_t* ai = arg + (size_t(c) * n + b) * Q * Q;
            for (int q = 0; q < Q * Q; ++q) {
                const int ph = q / Q, pw = q % Q, k = ai[q];
                dxi[(2 * ph + k / 2) * S + 2 * pw + k % 2] = dy[c * sc + b * sn + q];
            }
        }
}

class CpuNet {
public:
    // threads: OpenBLAS threads for chunks of more than SMALL images (0: OpenBLAS's default)
    CpuNet(const py::object& params, int threads) : threads_(threads > 0 ? threads : BLAS_THREADS) {
        if (threads < 0) throw py::value_error("threads: expected 0 (OpenBLAS default) or a positive count");
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
            for (int b = 0; b < n; b += CHUNK)
                forward(xp + size_t(b) * S0 * S0, std::min(CHUNK, n - b), out + size_t(b) * OUT);
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
            for (int b = 0; b < n; b += CHUNK) {
                const int m = std::min(CHUNK, n - b);
                forward(xp + size_t(b) * S0 * S0, m, grown(logits_, size_t(m) * OUT));
                loss += backward(yp + b, m, n, b > 0);
            }
            for (int i = 0; i < NPARAM; ++i)                       // plain SGD
                for (size_t k = 0; k < p_[i].size(); ++k) p_[i][k] -= float(lr) * g_[i][k];
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
        g_[i].assign(a.size(), 0.0f);
        shape_[i].assign(shape.begin(), shape.end());
    }

    // x (n, 1, 28, 28) -> logits (n, 10), keeping what backward needs.
    void forward(const float* x, int n, float* logits) {
        scipy_openblas_set_num_threads(n <= SMALL ? 1 : threads_);
        const int np1 = n * S1 * S1, np2 = n * S2 * S2;
        float* cols1 = grown(cols1_, size_t(KK) * np1);            // 25, n*576
        float* conv1 = grown(conv1_, size_t(C1) * np1);            // 20, n, 24, 24
        float* pool1 = grown(pool1_, size_t(C1) * n * Q1 * Q1);    // 20, n, 12, 12
        float* cols2 = grown(cols2_, size_t(C1 * KK) * np2);       // 500, n*64
        float* conv2 = grown(conv2_, size_t(C2) * np2);            // 50, n, 8, 8
        float* flat = grown(flat_, size_t(n) * FLAT);              // n, 800 in (c, h, w) order
        float* relu = grown(relu_, size_t(n) * HID);               // n, 500
        if (arg1_.size() < size_t(C1) * n * Q1 * Q1) arg1_.resize(size_t(C1) * n * Q1 * Q1);
        if (arg2_.size() < size_t(n) * FLAT) arg2_.resize(size_t(n) * FLAT);

        im2col(x, 1, n, S0, cols1);                                // (n,1,28,28) is (1,n,28,28)
        fill_rows(conv1, C1, np1, p_[B1].data(), true);
        gemm(false, false, C1, np1, KK, p_[W1].data(), cols1, 1.0f, conv1);
        maxpool(conv1, C1, n, S1, pool1, size_t(n) * Q1 * Q1, Q1 * Q1, arg1_.data());
        im2col(pool1, C1, n, Q1, cols2);
        fill_rows(conv2, C2, np2, p_[B2].data(), true);
        gemm(false, false, C2, np2, C1 * KK, p_[W2].data(), cols2, 1.0f, conv2);
        maxpool(conv2, C2, n, S2, flat, Q2 * Q2, FLAT, arg2_.data());
        fill_rows(relu, n, HID, p_[FB1].data(), false);
        gemm(false, true, n, HID, FLAT, flat, p_[F1].data(), 1.0f, relu);
        for (size_t k = 0; k < size_t(n) * HID; ++k) relu[k] = std::max(relu[k], 0.0f);
        fill_rows(logits, n, OUT, p_[FB2].data(), false);
        gemm(false, true, n, OUT, HID, relu, p_[F2].data(), 1.0f, logits);
    }

    // Gradients of this chunk's share of the batch-mean loss into g_ (added if `add`);
    // returns the chunk's summed loss. labels (n,); total: the whole batch size.
    double backward(const int32_t* labels, int n, int total, bool add) {
        const int np1 = n * S1 * S1, np2 = n * S2 * S2;
        const float beta = add ? 1.0f : 0.0f;
        float* dlogits = grown(dlogits_, size_t(n) * OUT);         // n, 10
        float* dh = grown(dh_, size_t(n) * HID);                   // n, 500
        float* dflat = grown(dflat_, size_t(n) * FLAT);            // n, 800
        float* dconv2 = grown(dconv2_, size_t(C2) * np2);          // 50, n*64
        float* dcols2 = grown(dcols2_, size_t(C1 * KK) * np2);     // 500, n*64
        float* dpool1 = grown(dpool1_, size_t(C1) * n * Q1 * Q1);  // 20, n, 12, 12
        float* dconv1 = grown(dconv1_, size_t(C1) * np1);          // 20, n*576

        double loss = 0;                                           // softmax cross-entropy
        for (int b = 0; b < n; ++b) {
            const float* z = logits_.data() + b * OUT;
            const float zmax = *std::max_element(z, z + OUT);
            double sum = 0;
            for (int k = 0; k < OUT; ++k) sum += std::exp(double(z[k]) - zmax);
            loss += std::log(sum) - (double(z[labels[b]]) - zmax);
            for (int k = 0; k < OUT; ++k)
                dlogits[b * OUT + k] = float((std::exp(double(z[k]) - zmax) / sum - (k == labels[b])) / total);
        }
        gemm(true, false, OUT, HID, n, dlogits, relu_.data(), beta, g_[F2].data());       // fc2
        col_sums(dlogits, n, OUT, g_[FB2].data(), add);
        gemm(false, false, n, HID, OUT, dlogits, p_[F2].data(), 0.0f, dh);
        for (size_t k = 0; k < size_t(n) * HID; ++k)                                         // ReLU
            if (relu_[k] <= 0) dh[k] = 0;
        gemm(true, false, HID, FLAT, n, dh, flat_.data(), beta, g_[F1].data());            // fc1
        col_sums(dh, n, HID, g_[FB1].data(), add);
        gemm(false, false, n, FLAT, HID, dh, p_[F1].data(), 0.0f, dflat);
        maxpool_backward(dflat, C2, n, S2, Q2 * Q2, FLAT, arg2_.data(), dconv2);            // pool2
        gemm(false, true, C2, C1 * KK, np2, dconv2, cols2_.data(), beta, g_[W2].data());   // conv2
        row_sums(dconv2, C2, np2, g_[B2].data(), add);
        gemm(true, false, C1 * KK, np2, C2, p_[W2].data(), dconv2, 0.0f, dcols2);
        col2im(dcols2, C1, n, Q1, dpool1);
        maxpool_backward(dpool1, C1, n, S1, size_t(n) * Q1 * Q1, Q1 * Q1, arg1_.data(), dconv1);  // pool1
        gemm(false, true, C1, KK, np1, dconv1, cols1_.data(), beta, g_[W1].data());        // conv1
        row_sums(dconv1, C1, np1, g_[B1].data(), add);
        return loss;
    }

    std::vector<float> p_[NPARAM], g_[NPARAM];                     // parameters, canonical; gradients
    std::vector<py::ssize_t> shape_[NPARAM];
    std::vector<float> cols1_, conv1_, pool1_, cols2_, conv2_, flat_, relu_, logits_;
    std::vector<float> dlogits_, dh_, dflat_, dconv2_, dcols2_, dpool1_, dconv1_;
    std::vector<uint8_t> arg1_, arg2_;                             // first max of each pool window
    const int threads_;
    std::mutex mu_;                                                // one call at a time per net
};

}  // namespace

void bind_cblas(py::module_& m) {
    py::class_<CpuNet>(m, "CpuNet", "LeNet on the CPU: im2col + OpenBLAS sgemm, forward, backward and SGD")
        .def(py::init<const py::object&, int>(), py::arg("params"), py::arg("threads") = 0,
             "params: {name: float32 C-contiguous array} with the eight canonical tensors; threads: "
             "OpenBLAS threads for batches of more than 4 images (0: OpenBLAS's default; smaller batches use one)")
        .def("predict", &CpuNet::predict, py::arg("images"), "(N, 1, 28, 28) float32 -> (N, 10) float32 logits")
        .def("train_step", &CpuNet::train_step, py::arg("images"), py::arg("labels"), py::arg("lr"),
             "one SGD step on the mean softmax cross-entropy; labels int32 (N,) in [0, 10); returns the loss")
        .def("parameters", &CpuNet::parameters, "{name: float32 array}, canonical layouts (copies)");
    m.def("blas_config", [] { return std::string(scipy_openblas_get_config()); }, "the OpenBLAS build in use");
}
