// cblas backend (cpu): LeNet forward, backward and plain SGD in C++ (csrc/model.h); what each
// version bought is in csrc/NOTES.md.
// Forward, per image: direct vectorised convolutions (each vector W consecutive output pixels:
// of a row-stride-28 plane for conv1, of the 8x8 plane for conv2; a block of output channels'
// accumulators in registers, each tap one broadcast weight times one load), then max-pooled (bias
// added after the max, which commutes with it). Compiled three times (AVX-512 W = 16, AVX2+FMA
// W = 8, generic x86-64 W = 4) and picked at load time, so the module runs on any x86-64. Dense layers: one row-dot kernel for a single image,
// one cblas_sgemm per chunk of images otherwise.
// Backward: im2col + cblas_sgemm per image for the convolutions, sgemm per chunk for the dense layers.
// Threads (OpenBLAS itself runs single-threaded): a single image is split over the calling thread
// and one persistent helper (half of each layer's output channels / rows each); a batch of more
// than SMALL images is split into contiguous ranges, one std::thread each (own scratch and gradient
// sums, added up before the SGD update), each range in chunks of at most CHUNK images.
#include "cblas_net.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <vector>

namespace lenet {
namespace {

using namespace model;
constexpr int CHUNK = 64;
constexpr int SMALL = 4;            // batches up to this size run image by image
constexpr int R1 = S1 * S0;         // a conv1 output plane in row-stride-28 layout (columns 24..27 unused)
constexpr int XPAD = IMG + 16;      // an image padded so conv1's last vector loads stay inside
const int BLAS_THREADS = scipy_openblas_get_num_threads();   // OpenBLAS's default, read at load

using Params = std::vector<float>[NUM_TENSORS];

template <class T>
T* grown(std::vector<T>& v, size_t n) {
    if (v.size() < n) v.resize(n);
    return v.data();
}

// --- forward kernels: one source, compiled per instruction set (see KERNELS below) ---------------

template <int W>   // W floats: one zmm (16), ymm (8) or xmm (4) register per target
struct Vec {
    typedef float type __attribute__((vector_size(4 * W)));
};
#define ALWAYS_INLINE inline __attribute__((always_inline))

template <int W>
ALWAYS_INLINE typename Vec<W>::type load(const float* p) {
    typename Vec<W>::type v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
// W consecutive conv2 output pixels (8 per row) from row r of the input: W = 16 is rows r and
// r + Q1 joined by one shuffle; W <= 8 is one load.
template <int W>
ALWAYS_INLINE typename Vec<W>::type load_rows(const float* r) {
    if constexpr (W == 16) {
        const auto a = load<8>(r), b = load<8>(r + Q1);
        return __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    } else {
        return load<W>(r);
    }
}
template <int W>
ALWAYS_INLINE float hsum(typename Vec<W>::type v) {
    float s = 0;
    for (int l = 0; l < W; ++l) s += v[l];
    return s;
}
ALWAYS_INLINE float max2(float a, float b) { return a < b ? b : a; }   // by value: vectorises (maxps)

// Max-pool 2x2/2 of one plane (S rows of STRIDE floats, the first S columns used) plus bias:
// y (S/2, S/2); arg, unless null: the first maximum of each window in row-major order (0..3).
template <int S, int STRIDE>
ALWAYS_INLINE void pool_plane(const float* x, float bias, float* y, uint8_t* arg) {
    constexpr int Q = S / 2;
    for (int ph = 0; ph < Q; ++ph) {
        const float* r0 = x + 2 * ph * STRIDE;
        const float* r1 = r0 + STRIDE;
        if (!arg) {   // inference: two vectorisable maxima
            float m[S];
            for (int k = 0; k < S; ++k) m[k] = max2(r0[k], r1[k]);
            for (int pw = 0; pw < Q; ++pw) y[ph * Q + pw] = max2(m[2 * pw], m[2 * pw + 1]) + bias;
            continue;
        }
        float a[Q], b[Q], c[Q], d[Q];   // the four corners of each window: branch-free, vectorisable
        for (int pw = 0; pw < Q; ++pw) a[pw] = r0[2 * pw], b[pw] = r0[2 * pw + 1], c[pw] = r1[2 * pw], d[pw] = r1[2 * pw + 1];
        for (int pw = 0; pw < Q; ++pw) {
            const float m = max2(max2(a[pw], b[pw]), max2(c[pw], d[pw]));
            y[ph * Q + pw] = m + bias;
            int k = 3;
            k = c[pw] == m ? 2 : k;
            k = b[pw] == m ? 1 : k;
            k = a[pw] == m ? 0 : k;
            arg[ph * Q + pw] = uint8_t(k);
        }
    }
}

// conv1 + pool1 for output channels [o0, o1) ((o1 - o0) % NB == 0) of one padded image x (XPAD):
// conv (C1, R1) scratch, pool (C1, 12, 12), arg (C1, 12, 12) or null.
template <int W, int NB>
ALWAYS_INLINE void conv1_pool_t(const float* w, const float* bias, const float* x, int o0, int o1, float* conv,
                                float* pool, uint8_t* arg) {
    for (int o = o0; o < o1; o += NB) {
        for (int v = 0; v < R1; v += W) {
            typename Vec<W>::type acc[NB] = {};
            for (int i = 0; i < K; ++i)
                for (int j = 0; j < K; ++j) {
                    const auto xv = load<W>(x + v + i * S0 + j);
#pragma GCC unroll 32
                    for (int b = 0; b < NB; ++b) acc[b] += w[(o + b) * KK + i * K + j] * xv;
                }
#pragma GCC unroll 32
            for (int b = 0; b < NB; ++b) std::memcpy(conv + (o + b) * R1 + v, &acc[b], sizeof acc[b]);
        }
    }
    for (int o = o0; o < o1; ++o) pool_plane<S1, S0>(conv + o * R1, bias[o], pool + o * Q1 * Q1, arg ? arg + o * Q1 * Q1 : nullptr);
}

// conv2 + pool2 for output channels [o0, o1) ((o1 - o0) % NB == 0) of pool1 x (C1, 12, 12):
// conv (C2, 64) scratch, flat (C2 * 16) = pool2 in (c, h, w) order, arg (C2 * 16) or null.
template <int W, int NB>
ALWAYS_INLINE void conv2_pool_t(const float* w, const float* bias, const float* x, int o0, int o1, float* conv,
                                float* flat, uint8_t* arg) {
    for (int o = o0; o < o1; o += NB)
        for (int v = 0; v < P2; v += W) {   // output pixels v .. v + W - 1 (row v / 8)
            typename Vec<W>::type acc[NB] = {};
            for (int c = 0; c < C1; ++c)
                for (int i = 0; i < K; ++i)
                    for (int j = 0; j < K; ++j) {
                        const auto xv = load_rows<W>(x + (c * Q1 + v / S2 + i) * Q1 + v % S2 + j);
                        const float* wk = w + size_t(o) * C1 * KK + (c * K + i) * K + j;
#pragma GCC unroll 32
                        for (int b = 0; b < NB; ++b) acc[b] += wk[b * C1 * KK] * xv;
                    }
#pragma GCC unroll 32
            for (int b = 0; b < NB; ++b) std::memcpy(conv + (o + b) * P2 + v, &acc[b], sizeof acc[b]);
        }
    for (int o = o0; o < o1; ++o) pool_plane<S2, S2>(conv + o * P2, bias[o], flat + o * Q2 * Q2, arg ? arg + o * Q2 * Q2 : nullptr);
}

// y[r] = bias[r] + w[r, :] · x for rows [r0, r1) of w (rows, IN), then ReLU if RELU.
template <int W, int IN, bool RELU>
ALWAYS_INLINE void dense_t(const float* w, const float* bias, const float* x, int r0, int r1, float* y) {
    using V = typename Vec<W>::type;
    constexpr int N = IN / W * W;
    auto finish = [&](int r, V acc) {
        float s = hsum<W>(acc);
        for (int k = N; k < IN; ++k) s += w[size_t(r) * IN + k] * x[k];
        s += bias[r];
        y[r] = RELU ? std::max(s, 0.0f) : s;
    };
    int r = r0;
    for (; r + 4 <= r1; r += 4) {   // four rows share each load of x
        const float* w0 = w + size_t(r) * IN;
        V a0 = {}, a1 = {}, a2 = {}, a3 = {};
        for (int k = 0; k < N; k += W) {
            const V xv = load<W>(x + k);
            a0 += load<W>(w0 + k) * xv, a1 += load<W>(w0 + IN + k) * xv;
            a2 += load<W>(w0 + 2 * IN + k) * xv, a3 += load<W>(w0 + 3 * IN + k) * xv;
        }
        finish(r, a0), finish(r + 1, a1), finish(r + 2, a2), finish(r + 3, a3);
    }
    for (; r < r1; ++r) {
        V a = {};
        for (int k = 0; k < N; k += W) a += load<W>(w + size_t(r) * IN + k) * load<W>(x + k);
        finish(r, a);
    }
}

struct Kernels {
    const char* isa;
    void (*conv1_pool)(const float*, const float*, const float*, int, int, float*, float*, uint8_t*);
    void (*conv2_pool)(const float*, const float*, const float*, int, int, float*, float*, uint8_t*);
    void (*fc1_relu)(const float*, const float*, const float*, int, int, float*);
    void (*fc2)(const float*, const float*, const float*, int, int, float*);
};

// W: floats per vector register; NB1, NB2: conv1's and conv2's channel blocks (accumulator
// registers: 32 zmm with AVX-512, 16 ymm / xmm otherwise).
#define KERNELS(NAME, TARGET, W, NB1, NB2)                                                                    \
    TARGET void NAME##_conv1(const float* w, const float* b, const float* x, int o0, int o1, float* t,         \
                             float* y, uint8_t* a) { conv1_pool_t<W, NB1>(w, b, x, o0, o1, t, y, a); }         \
    TARGET void NAME##_conv2(const float* w, const float* b, const float* x, int o0, int o1, float* t,         \
                             float* y, uint8_t* a) { conv2_pool_t<W, NB2>(w, b, x, o0, o1, t, y, a); }         \
    TARGET void NAME##_fc1(const float* w, const float* b, const float* x, int r0, int r1, float* y) {         \
        dense_t<W, FLAT, true>(w, b, x, r0, r1, y);                                                            \
    }                                                                                                          \
    TARGET void NAME##_fc2(const float* w, const float* b, const float* x, int r0, int r1, float* y) {         \
        dense_t<W, HID, false>(w, b, x, r0, r1, y);                                                            \
    }                                                                                                          \
    const Kernels NAME = {#NAME, NAME##_conv1, NAME##_conv2, NAME##_fc1, NAME##_fc2};

KERNELS(avx512, __attribute__((target("avx512f,avx512vl,avx2,fma"))), 16, 10, 25)
KERNELS(avx2, __attribute__((target("avx2,fma"))), 8, 10, 5)
KERNELS(generic, , 4, 10, 5)
#undef KERNELS

const Kernels& kernels(const std::string& isa) {
    __builtin_cpu_init();
    const bool has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    const bool has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (isa == "auto") return has512 ? avx512 : has2 ? avx2 : generic;
    if (isa == "generic") return generic;
    if (isa == "avx2" && has2) return avx2;
    if (isa == "avx512" && has512) return avx512;
    if (isa == "avx2" || isa == "avx512") throw std::invalid_argument("isa: this CPU has no " + isa);
    throw std::invalid_argument("isa: expected auto, avx512, avx2 or generic, got '" + isa + "'");
}

ALWAYS_INLINE void pause() {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

// --- one image over two threads ------------------------------------------------------------------

// The forward pass of one image in three phases (conv1+pool1, conv2+pool2, fc1+ReLU), each split
// into two units of half the output channels / rows; then fc2. The calling thread runs unit 0 of
// each phase and unit 1 too unless the helper thread has claimed it first, so the result never
// waits for a helper that is asleep or descheduled; a barrier between phases (each reads all of
// the previous one). The helper spins for SPIN after a job, then sleeps on a condition variable.
class Single {
public:
    explicit Single(bool helper) {
        if (!helper) return;
        try {
            thread_ = std::thread([this] { serve(); });
        } catch (const std::system_error&) {   // no thread: the calling thread does everything
        }
    }
    ~Single() {
        if (!thread_.joinable()) return;
        {
            std::lock_guard<std::mutex> lock(m_);
            stop_ = true;
        }
        cv_.notify_one();
        thread_.join();
    }

    void forward(const Params& p, const Kernels& k, const float* x, float* logits) {
        p_ = &p, k_ = &k;
        std::memcpy(x_, x, IMG * sizeof(float));
        const uint64_t g = ++job_;
        gen_.store(g);
        if (sleeping_.load()) {
            std::lock_guard<std::mutex> lock(m_);
            cv_.notify_one();
        }
        for (int phase = 0; phase < 3; ++phase) {
            unit(phase, 0);
            done_[phase][0].store(g, std::memory_order_release);
            if (!claim(phase, g))
                while (done_[phase][1].load(std::memory_order_acquire) < g) pause();
        }
        k.fc2(p[F2].data(), p[FB2].data(), hidden_, 0, OUT, logits);
    }

private:
    static constexpr auto SPIN = std::chrono::microseconds(200);

    void unit(int phase, int u) {
        const Params& p = *p_;
        if (phase == 0)
            k_->conv1_pool(p[W1].data(), p[B1].data(), x_, u * C1 / 2, (u + 1) * C1 / 2, conv1_, pool1_, nullptr);
        else if (phase == 1)
            k_->conv2_pool(p[W2].data(), p[B2].data(), pool1_, u * C2 / 2, (u + 1) * C2 / 2, conv2_, flat_, nullptr);
        else
            k_->fc1_relu(p[F1].data(), p[FB1].data(), flat_, u * HID / 2, (u + 1) * HID / 2, hidden_);
    }

    // Run unit 1 of `phase` for job g unless someone already has; false if so.
    bool claim(int phase, uint64_t g) {
        uint64_t c = claimed_[phase].load(std::memory_order_relaxed);
        if (c >= g || !claimed_[phase].compare_exchange_strong(c, g, std::memory_order_acq_rel)) return false;
        unit(phase, 1);
        done_[phase][1].store(g, std::memory_order_release);
        return true;
    }

    void serve() {
        for (uint64_t seen = 0;;) {
            const uint64_t g = wait(seen);
            if (g == 0) return;
            seen = g;
            for (int phase = 0; phase < 3; ++phase) {
                claim(phase, g);
                if (phase < 2)   // the next phase reads all of this one
                    while (done_[phase][0].load(std::memory_order_acquire) < g ||
                           done_[phase][1].load(std::memory_order_acquire) < g)
                        pause();
            }
        }
    }

    // The next job number after `seen`, 0 to stop: spin for SPIN, then sleep.
    uint64_t wait(uint64_t seen) {
        const auto start = std::chrono::steady_clock::now();
        for (int i = 1;; ++i) {
            const uint64_t g = gen_.load(std::memory_order_acquire);
            if (g != seen) return g;
            pause();
            if (i % 64 == 0 && (stop_.load(std::memory_order_relaxed) || std::chrono::steady_clock::now() - start > SPIN))
                break;
        }
        std::unique_lock<std::mutex> lock(m_);
        sleeping_.store(true);   // seq_cst with forward's gen_ store / sleeping_ load: no lost wake-up
        cv_.wait(lock, [&] { return stop_.load() || gen_.load() != seen; });
        sleeping_.store(false);
        return stop_.load() ? 0 : gen_.load(std::memory_order_acquire);
    }

    const Params* p_ = nullptr;
    const Kernels* k_ = nullptr;
    alignas(64) float x_[XPAD] = {};
    alignas(64) float conv1_[C1 * R1], pool1_[POOL1], conv2_[C2 * P2], flat_[FLAT], hidden_[HID];
    uint64_t job_ = 0;
    alignas(64) std::atomic<uint64_t> gen_{0};
    alignas(64) std::atomic<uint64_t> claimed_[3] = {};
    alignas(64) std::atomic<uint64_t> done_[3][2] = {};
    std::atomic<bool> stop_{false}, sleeping_{false};
    std::mutex m_;
    std::condition_variable cv_;
    std::thread thread_;
};

// --- batches -------------------------------------------------------------------------------------

// C (m, n) = beta·C + op(A) (m, k) · op(B) (k, n), row-major.
void gemm(bool ta, bool tb, int m, int n, int k, const float* a, const float* b, float beta, float* c) {
    scipy_cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
                      1.0f, a, ta ? m : k, b, tb ? k : n, beta, c, n);
}

// Every row of y (rows, cols) = bias.
void fill_rows(float* y, int rows, int cols, const float* bias) {
    for (int r = 0; r < rows; ++r) std::copy(bias, bias + cols, y + size_t(r) * cols);
}

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

// One thread's share of a batch: forward and backward over a chunk of images, with its own
// per-image scratch (stays in L2), per-chunk activations and gradient sums.
class Worker {
public:
    std::vector<float> g[NUM_TENSORS];                             // gradient sums, canonical layouts

    // x (n, 1, 28, 28) -> logits (n, 10), keeping what backward needs.
    void forward(const Params& p, const Kernels& k, const float* x, int n, float* logits) {
        uint8_t* arg1 = grown(arg1_, size_t(n) * POOL1);           // first max of each pool window
        uint8_t* arg2 = grown(arg2_, size_t(n) * FLAT);
        float* pool1 = grown(pool1_, size_t(n) * POOL1);           // n, 20, 12, 12
        float* flat = grown(flat_, size_t(n) * FLAT);              // n, 800 = pool2 in (c, h, w) order
        float* relu = grown(relu_, size_t(n) * HID);               // n, 500
        for (int b = 0; b < n; ++b) {
            std::memcpy(xpad_.data(), x + size_t(b) * IMG, IMG * sizeof(float));
            k.conv1_pool(p[W1].data(), p[B1].data(), xpad_.data(), 0, C1, conv1_.data(), pool1 + size_t(b) * POOL1,
                         arg1 + size_t(b) * POOL1);
            k.conv2_pool(p[W2].data(), p[B2].data(), pool1 + size_t(b) * POOL1, 0, C2, conv2_.data(),
                         flat + size_t(b) * FLAT, arg2 + size_t(b) * FLAT);
        }
        fill_rows(relu, n, HID, p[FB1].data());                                         // fc1 + ReLU
        gemm(false, true, n, HID, FLAT, flat, p[F1].data(), 1.0f, relu);
        for (size_t i = 0; i < size_t(n) * HID; ++i) relu[i] = std::max(relu[i], 0.0f);
        fill_rows(logits, n, OUT, p[FB2].data());                                       // fc2
        gemm(false, true, n, OUT, HID, relu, p[F2].data(), 1.0f, logits);
    }

    // After forward(p, k, x, n, logits): this chunk's share of the gradient of the batch-mean loss
    // (batch size `total`) into g, added to it if `add`; returns the chunk's summed loss.
    double backward(const Params& p, const float* x, const float* logits, const int32_t* labels, int n, int total,
                    bool add) {
        for (int i = 0; i < NUM_TENSORS; ++i) g[i].resize(p[i].size());
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
            im2col<C1, Q1>(pool1_.data() + size_t(b) * POOL1, cols2_.data());
            gemm(false, true, C2, C1 * KK, P2, dconv2_.data(), cols2_.data(), acc ? 1.0f : 0.0f, g[W2].data());    // conv2
            row_sums(dconv2_.data(), C2, P2, g[B2].data(), acc);
            gemm(true, false, C1 * KK, P2, C2, p[W2].data(), dconv2_.data(), 0.0f, dcols2_.data());
            col2im<C1, Q1>(dcols2_.data(), dpool1_.data());
            maxpool_backward<C1, S1>(dpool1_.data(), arg1_.data() + size_t(b) * POOL1, dconv1_.data());  // pool1
            im2col<1, S0>(x + size_t(b) * IMG, cols1_.data());
            gemm(false, true, C1, KK, P1, dconv1_.data(), cols1_.data(), acc ? 1.0f : 0.0f, g[W1].data());        // conv1
            row_sums(dconv1_.data(), C1, P1, g[B1].data(), acc);
        }
        return loss;
    }

private:
    std::vector<float> xpad_ = std::vector<float>(XPAD), conv1_ = std::vector<float>(C1 * R1);   // per image
    std::vector<float> conv2_ = std::vector<float>(C2 * P2);
    std::vector<float> cols1_ = std::vector<float>(KK * P1), cols2_ = std::vector<float>(C1 * KK * P2);
    std::vector<float> dconv2_ = std::vector<float>(C2 * P2), dcols2_ = std::vector<float>(C1 * KK * P2);
    std::vector<float> dpool1_ = std::vector<float>(POOL1), dconv1_ = std::vector<float>(C1 * P1);
    std::vector<float> pool1_, flat_, relu_, dlogits_, dh_, dflat_;                               // per chunk
    std::vector<uint8_t> arg1_, arg2_;
};

}  // namespace

struct CpuNet::Impl {
    Params p;                                                      // parameters, canonical layouts
    const int threads;
    const Kernels& k;
    Single single;
    std::vector<Worker> workers;
    std::mutex mu;                                                 // one call at a time per net

    Impl(int threads, const std::string& isa) : threads(threads), k(kernels(isa)), single(threads > 1) {}

    int workers_for(int n) const { return n > SMALL ? std::min(threads, n) : 1; }

    // f(worker, first image, count) over [0, n) in chunks of at most CHUNK images; the images are
    // split into workers_for(n) contiguous ranges, one thread each (run here if none can start).
    // An exception in any thread is rethrown here after all have finished.
    template <class F>
    void for_chunks(int n, F f) {
        const int w = workers_for(n);
        if (workers.size() < size_t(w)) workers.resize(w);
        scipy_openblas_set_num_threads(1);                         // the parallelism is ours
        std::vector<std::exception_ptr> errors(w);
        auto range = [&](int t) {
            try {
                for (int b = n * t / w, end = n * (t + 1) / w; b < end; b += CHUNK)
                    f(workers[t], b, std::min(CHUNK, end - b));
            } catch (...) {
                errors[t] = std::current_exception();
            }
        };
        std::vector<std::thread> pool;
        for (int t = 1; t < w; ++t) {
            try {
                pool.emplace_back(range, t);
            } catch (const std::system_error&) {
                range(t);
            }
        }
        range(0);
        for (auto& t : pool) t.join();
        for (auto& e : errors)
            if (e) std::rethrow_exception(e);
    }
};

CpuNet::CpuNet(const float* const params[NUM_TENSORS], int threads, const std::string& isa) {
    if (threads < 0 || threads > 256) throw std::invalid_argument("threads: expected 0 (OpenBLAS default) to 256");
    impl_ = std::make_unique<Impl>(threads > 0 ? threads : std::max(BLAS_THREADS, 1), isa);
    for (int t = 0; t < NUM_TENSORS; ++t) impl_->p[t].assign(params[t], params[t] + size(t));
}

CpuNet::~CpuNet() = default;

int CpuNet::threads() const { return impl_->threads; }
const char* CpuNet::isa() const { return impl_->k.isa; }

void CpuNet::predict(const float* images, int n, float* logits) {
    Impl& m = *impl_;
    std::lock_guard<std::mutex> lock(m.mu);
    if (n <= SMALL) {
        for (int b = 0; b < n; ++b) m.single.forward(m.p, m.k, images + size_t(b) * IMG, logits + size_t(b) * OUT);
        return;
    }
    m.for_chunks(n, [&](Worker& w, int b, int c) { w.forward(m.p, m.k, images + size_t(b) * IMG, c, logits + size_t(b) * OUT); });
}

double CpuNet::train_step(const float* images, const int32_t* labels, int n, float lr) {
    Impl& m = *impl_;
    std::lock_guard<std::mutex> lock(m.mu);
    const int w = m.workers_for(n);
    std::vector<float> logits(size_t(n) * OUT);
    std::vector<double> losses(w, 0.0);
    std::vector<int> started(w, -1);                               // each worker's first image
    m.for_chunks(n, [&](Worker& wk, int b, int c) {
        const size_t t = &wk - m.workers.data();
        if (started[t] < 0) started[t] = b;
        wk.forward(m.p, m.k, images + size_t(b) * IMG, c, logits.data() + size_t(b) * OUT);
        losses[t] += wk.backward(m.p, images + size_t(b) * IMG, logits.data() + size_t(b) * OUT, labels + b, c, n,
                                 b > started[t]);
    });
    for (int i = 0; i < NUM_TENSORS; ++i) {                        // the workers' sums, then plain SGD
        std::vector<float>& g = m.workers[0].g[i];
        for (int t = 1; t < w; ++t)
            for (size_t k = 0; k < g.size(); ++k) g[k] += m.workers[t].g[i][k];
        for (size_t k = 0; k < g.size(); ++k) m.p[i][k] -= lr * g[k];
    }
    double loss = 0;
    for (double l : losses) loss += l;
    return loss / n;
}

void CpuNet::parameters(float* const out[NUM_TENSORS]) {
    std::lock_guard<std::mutex> lock(impl_->mu);
    for (int t = 0; t < NUM_TENSORS; ++t) std::copy(impl_->p[t].begin(), impl_->p[t].end(), out[t]);
}

const char* blas_config() { return scipy_openblas_get_config(); }

}  // namespace lenet
