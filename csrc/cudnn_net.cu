// cudnn backend (gpu): LeNet forward, backward and SGD as a flat list of cuDNN and cuBLAS calls on
// one stream, in the manner of NVIDIA's cudnn-training sample (docs/architecture.md).
//   conv:  cudnnConvolutionForward + cudnnAddTensor (bias)     pool: cudnnPoolingForward (max 2x2/2)
//   dense: cublasSgemm + cudnnAddTensor (bias), cudnnActivationForward (ReLU) after fc1
// Dense GEMM maths. cuBLAS is column-major, so a row-major (r, c) matrix is read as its transpose:
//   forward   Y (N,out) = X (N,in) · Wᵀ    col-major  Yᵀ (out,N) = W · Xᵀ    sgemm(T, N, out, N, in)
//   backward dX (N,in)  = dY · W           col-major dXᵀ (in,N)  = Wᵀ · dYᵀ  sgemm(N, N, in, N, out)
//            dW (out,in) = dYᵀ · X         col-major dWᵀ (in,out) = Xᵀ · dY  sgemm(N, T, in, out, N)
// The SGD update is folded into the weight-gradient calls: they write param = param + (-lr)·gradient
// (alpha = -lr, beta = 1), after the layer's input gradient has been taken with the old weights.
// A Plan per batch size holds the descriptors, the algorithms chosen (cudnnFind*, or cudnnGet*_v7
// when deterministic), the workspace and the activations: batch 1 keeps its own (and its CUDA graph); the MAX_PLANS most recently used other sizes
// keep theirs, so an epoch's tail batch or alternating train/eval sizes never re-plan.
// No TF32: convolutions run in CUDNN_FMA_MATH, cuBLAS in CUBLAS_DEFAULT_MATH (FP32 compute).
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

#include "cuda_check.h"
#include "cudnn_net.h"

namespace lenet {

namespace {

using namespace model;   // sizes and tensor order: 1x28x28 -conv1-> 20x24x24 -pool1-> 20x12x12 -conv2-> 50x8x8 ...
constexpr size_t CUBLAS_WORKSPACE = 32u << 20;      // cuBLAS' advice for Hopper; set, so capture never allocates
const float ONE = 1.0f, ZERO = 0.0f;

size_t elements(int t) { return size_t(model::size(t)); }

TensorDesc tensor(int n, int c, int h, int w) {   // (n, c, h, w) float32, packed NCHW
    TensorDesc d = LENET_OWN(TensorDesc, cudnnCreateTensorDescriptor);
    LENET_CHECK(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w));
    return d;
}

FilterDesc filter(int out, int in) {   // OIHW K x K, the canonical conv weight layout
    FilterDesc d = LENET_OWN(FilterDesc, cudnnCreateFilterDescriptor);
    LENET_CHECK(cudnnSetFilter4dDescriptor(d.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, out, in, K, K));
    return d;
}

// The first ranked result that succeeded, in FP32 math without tensor cores (FMA, or DEFAULT as some
// versions report it; the descriptor stays FMA) and, if asked, deterministic.
template <class Perf>
auto pick(const Perf* perf, int got, bool deterministic, const char* what) -> decltype(perf->algo) {
    for (int i = 0; i < got; ++i) {
        const Perf& r = perf[i];
        if (r.status == CUDNN_STATUS_SUCCESS && (r.mathType == CUDNN_FMA_MATH || r.mathType == CUDNN_DEFAULT_MATH) &&
            (!deterministic || r.determinism == CUDNN_DETERMINISTIC))
            return r.algo;
    }
    throw CudaError(std::string("cudnnFind*/Get*_v7: no ") + (deterministic ? "deterministic " : "") +
                    "FP32 algorithm succeeded for " + what);
}

// From logp (n, 10) = log_softmax(logits): dlogits = (softmax - onehot(y)) / n and
// loss = -mean_i logp[i, y_i]. One block of 256 threads, a thread per row, a tree sum for the loss.
__global__ void xent_grad(const float* logp, const int* y, int n, float* dlogits, float* loss) {
    __shared__ double part[256];
    double sum = 0;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        for (int k = 0; k < OUT; ++k)
            dlogits[i * OUT + k] = (expf(logp[i * OUT + k]) - (k == y[i] ? 1.0f : 0.0f)) / float(n);
        sum -= logp[i * OUT + y[i]];
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) *loss = float(part[0] / n);
}

}  // namespace

// Everything that depends on the batch size n. Dense activations are described as (n, features, 1, 1).
struct Plan {
    int n = 0;
    TensorDesc xd, c1d, p1d, c2d, p2d, f1d, lod;       // descriptors of the activations below
    DeviceArray<float> x, c1, p1, c2, p2, f1, lo;      // (n,1,28,28) (n,20,24,24) (n,20,12,12) (n,50,8,8)
                                                       // (n,50,4,4)=(n,800) (n,500) (n,10) logits
    PinnedArray<float> h_x, h_lo;                      // pinned staging of the images and logits
    cudnnConvolutionFwdAlgo_t fwd1{}, fwd2{};
    size_t ws_bytes = 0;
    DeviceArray<char> ws;                              // one cuDNN workspace for every call of this plan
    GraphExec io_graph;                                // batch 1 on the graph path: H2D, forward, D2H
    GraphExec forward_graph;                           // the forward alone, for device_times_us "kernels"
    // training, set up by the first train_step at this batch size
    bool trains = false;
    cudnnConvolutionBwdDataAlgo_t bwd_data2{};
    cudnnConvolutionBwdFilterAlgo_t bwd_filter1{}, bwd_filter2{};
    DeviceArray<float> logp, dlo, df1, dp2, dc2, dp1, dc1, loss;   // log-probabilities, then gradients
    DeviceArray<int> y;
    PinnedArray<float> h_loss;
    PinnedArray<int> h_y;
};

struct CudnnNet::Impl {
    bool use_graph, deterministic;
    Stream stream;                 // declared first: destroyed last
    DeviceArray<char> cublas_ws;   // outlives the cuBLAS handle that uses it
    CudnnHandle cudnn;
    CublasHandle cublas;
    Event start, stop;
    FilterDesc w1d, w2d;
    TensorDesc b1d, b2d, fb1d, fb2d;   // biases as (1, c, 1, 1)
    ConvDesc conv;                     // shared by conv1 and conv2: no padding, stride 1, cross-correlation
    PoolDesc pool;
    ActDesc relu;
    DeviceArray<float> p[NUM_TENSORS];   // the parameters, canonical layouts, on the device
    std::unique_ptr<Plan> one;                   // batch 1, never evicted
    std::vector<std::unique_ptr<Plan>> plans;    // other batch sizes, least recently used first
    int plans_made = 0;                          // every make_plan, so a test can see re-planning
    int staged = 0;                       // batch size of the last upload (0: none)
    bool ran = false, pending = false;    // forward enqueued since; work in flight on the staging buffers

    Impl(const float* const params[NUM_TENSORS], bool graph, bool det);
    cudaStream_t s() const { return stream.get(); }
    bool graph_path(const Plan& P) const { return use_graph && P.n == 1; }
    void settle();
    Plan& plan(int n);
    std::unique_ptr<Plan> make_plan(int n);
    void plan_training(Plan& P);
    template <class Perf, int COUNT, class Find, class Size, class A, class B, class C>
    auto choose(Find find, Find heuristic, Size size, A a, B b, C c, const char* what, size_t& need);
    cudnnConvolutionFwdAlgo_t forward_algo(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                                           cudnnTensorDescriptor_t y, const char* what, size_t& need);
    cudnnConvolutionBwdFilterAlgo_t filter_algo(cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
                                                cudnnFilterDescriptor_t dw, const char* what, size_t& need);
    cudnnConvolutionBwdDataAlgo_t data_algo(cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
                                            cudnnTensorDescriptor_t dx, const char* what, size_t& need);
    void copy_in(Plan& P);
    void copy_out(Plan& P);
    // the forward's calls; mark(layer) after each layer's (a no-op but in layer_times_us)
    template <class Mark>
    void forward_calls(Plan& P, Mark mark);
    void forward_calls(Plan& P) { forward_calls(P, [](const char*) {}); }
    void run(Plan& P);
    template <class Enqueue>
    GraphExec capture(Enqueue enqueue);
    float train(const float* images, const int* labels, int n, float lr);
};

CudnnNet::Impl::Impl(const float* const params[NUM_TENSORS], bool graph, bool det)
    : use_graph(graph), deterministic(det) {
    if (cudnnGetVersion() / 10000 != CUDNN_MAJOR)
        throw CudaError("cuDNN " + std::to_string(cudnnGetVersion()) + " loaded, but built against " +
                        std::to_string(CUDNN_VERSION));
    stream = LENET_OWN(Stream, cudaStreamCreateWithFlags, cudaStreamNonBlocking);
    cudaStream_t st = stream.get();
    cudnn = LENET_OWN(CudnnHandle, cudnnCreate);
    LENET_CHECK(cudnnSetStream(cudnn.get(), st));
    cublas = LENET_OWN(CublasHandle, cublasCreate);
    cublasHandle_t b = cublas.get();
    LENET_CHECK(cublasSetStream(b, st));   // resets the workspace, so set it after
    cublas_ws = device_array<char>(CUBLAS_WORKSPACE);
    LENET_CHECK(cublasSetWorkspace(b, cublas_ws.get(), CUBLAS_WORKSPACE));
    LENET_CHECK(cublasSetMathMode(b, CUBLAS_DEFAULT_MATH));   // FP32 SGEMM in FP32, never TF32
    start = LENET_OWN(Event, cudaEventCreateWithFlags, cudaEventDefault);
    stop = LENET_OWN(Event, cudaEventCreateWithFlags, cudaEventDefault);

    w1d = filter(C1, 1);
    w2d = filter(C2, C1);
    b1d = tensor(1, C1, 1, 1);
    b2d = tensor(1, C2, 1, 1);
    fb1d = tensor(1, HID, 1, 1);
    fb2d = tensor(1, OUT, 1, 1);
    conv = LENET_OWN(ConvDesc, cudnnCreateConvolutionDescriptor);
    LENET_CHECK(cudnnSetConvolution2dDescriptor(conv.get(), 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    LENET_CHECK(cudnnSetConvolutionMathType(conv.get(), CUDNN_FMA_MATH));   // no tensor cores, so no TF32
    pool = LENET_OWN(PoolDesc, cudnnCreatePoolingDescriptor);
    // Windows do not overlap; backward sends each gradient to one maximum of its window. Ties (blank
    // background) have identical inputs upstream, so which tied element gets it does not change the
    // parameter gradients.
    LENET_CHECK(cudnnSetPooling2dDescriptor(pool.get(), CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0,
                                            0, 2, 2));
    relu = LENET_OWN(ActDesc, cudnnCreateActivationDescriptor);
    LENET_CHECK(cudnnSetActivationDescriptor(relu.get(), CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));

    for (int t = 0; t < NUM_TENSORS; ++t) {   // upload once
        p[t] = device_array<float>(elements(t));
        LENET_CHECK(cudaMemcpyAsync(p[t].get(), params[t], elements(t) * sizeof(float), cudaMemcpyHostToDevice, st));
    }
    LENET_CHECK(cudaStreamSynchronize(st));
}

void CudnnNet::Impl::settle() {   // wait for queued work that still reads or writes the staging buffers
    if (pending) LENET_CHECK(cudaStreamSynchronize(s()));
    pending = false;
}

// The plan for batch size n, made on first use. Callers settle() first: an evicted plan's buffers
// must not be in use on the stream.
Plan& CudnnNet::Impl::plan(int n) {
    if (n == 1) {
        if (!one) one = make_plan(1);
        return *one;
    }
    auto it = std::find_if(plans.begin(), plans.end(), [n](const auto& P) { return P->n == n; });
    if (it != plans.end()) {
        std::rotate(it, it + 1, plans.end());   // now the most recently used
    } else {
        if (plans.size() == MAX_PLANS) plans.erase(plans.begin());   // free the least recently used first
        plans.push_back(make_plan(n));
    }
    return *plans.back();
}

// A convolution's algorithm, ranked for the operation's descriptors a, b, c: by `find` (a cudnnFind*,
// which times each of the COUNT algorithms, allocating its own scratch), or, for a deterministic net,
// by `heuristic` (the matching cudnnGet*_v7, which times nothing: two nets must choose alike, and on
// an H100 timing noise made two deterministic nets choose different algorithms, which sum in
// different orders). pick() chooses, and `need` grows to the chosen one's workspace (`size`, the
// matching cudnnGet*WorkspaceSize).
template <class Perf, int COUNT, class Find, class Size, class A, class B, class C>
auto CudnnNet::Impl::choose(Find find, Find heuristic, Size size, A a, B b, C c, const char* what, size_t& need) {
    Perf perf[COUNT];
    int got = 0;
    check((deterministic ? heuristic : find)(cudnn.get(), a, b, conv.get(), c, COUNT, &got, perf),
          (what + std::string(deterministic ? ": cudnnGet*_v7" : ": cudnnFind*")).c_str(), __FILE__, __LINE__);
    const auto algo = pick(perf, got, deterministic, what);
    size_t bytes = 0;
    check(size(cudnn.get(), a, b, conv.get(), c, algo, &bytes),
          (what + std::string(": cudnnGet*WorkspaceSize")).c_str(), __FILE__, __LINE__);
    need = std::max(need, bytes);
    return algo;
}

// The forward algorithm for x -> y with filter w.
cudnnConvolutionFwdAlgo_t CudnnNet::Impl::forward_algo(cudnnTensorDescriptor_t x, cudnnFilterDescriptor_t w,
                                                       cudnnTensorDescriptor_t y, const char* what, size_t& need) {
    return choose<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
        cudnnFindConvolutionForwardAlgorithm, cudnnGetConvolutionForwardAlgorithm_v7,
        cudnnGetConvolutionForwardWorkspaceSize, x, w, y, what, need);
}

// The weight gradient's, of x -> dy with filter dw.
cudnnConvolutionBwdFilterAlgo_t CudnnNet::Impl::filter_algo(cudnnTensorDescriptor_t x, cudnnTensorDescriptor_t dy,
                                                            cudnnFilterDescriptor_t dw, const char* what, size_t& need) {
    return choose<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
        cudnnFindConvolutionBackwardFilterAlgorithm, cudnnGetConvolutionBackwardFilterAlgorithm_v7,
        cudnnGetConvolutionBackwardFilterWorkspaceSize, x, dy, dw, what, need);
}

// The data gradient's, dy -> dx through filter w.
cudnnConvolutionBwdDataAlgo_t CudnnNet::Impl::data_algo(cudnnFilterDescriptor_t w, cudnnTensorDescriptor_t dy,
                                                        cudnnTensorDescriptor_t dx, const char* what, size_t& need) {
    return choose<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
        cudnnFindConvolutionBackwardDataAlgorithm, cudnnGetConvolutionBackwardDataAlgorithm_v7,
        cudnnGetConvolutionBackwardDataWorkspaceSize, w, dy, dx, what, need);
}

std::unique_ptr<Plan> CudnnNet::Impl::make_plan(int n) {
    auto P = std::make_unique<Plan>();
    ++plans_made;
    P->n = n;
    P->xd = tensor(n, 1, S0, S0);
    P->c1d = tensor(n, C1, S1, S1);
    P->p1d = tensor(n, C1, Q1, Q1);
    P->c2d = tensor(n, C2, S2, S2);
    P->p2d = tensor(n, C2, Q2, Q2);
    P->f1d = tensor(n, HID, 1, 1);
    P->lod = tensor(n, OUT, 1, 1);
    const size_t N = size_t(n);
    P->x = device_array<float>(N * IMG);
    P->c1 = device_array<float>(N * C1 * S1 * S1);
    P->p1 = device_array<float>(N * C1 * Q1 * Q1);
    P->c2 = device_array<float>(N * C2 * S2 * S2);
    P->p2 = device_array<float>(N * FLAT);
    P->f1 = device_array<float>(N * HID);
    P->lo = device_array<float>(N * OUT);
    P->h_x = pinned_array<float>(N * IMG);
    P->h_lo = pinned_array<float>(N * OUT);

    // Forward algorithms, chosen at this batch size.
    P->fwd1 = forward_algo(P->xd.get(), w1d.get(), P->c1d.get(), "conv1 forward", P->ws_bytes);
    P->fwd2 = forward_algo(P->p1d.get(), w2d.get(), P->c2d.get(), "conv2 forward", P->ws_bytes);
    P->ws = device_array<char>(std::max<size_t>(P->ws_bytes, 256));
    return P;
}

void CudnnNet::Impl::plan_training(Plan& P) {
    const size_t N = size_t(P.n);
    P.logp = device_array<float>(N * OUT);
    P.dlo = device_array<float>(N * OUT);
    P.df1 = device_array<float>(N * HID);
    P.dp2 = device_array<float>(N * FLAT);
    P.dc2 = device_array<float>(N * C2 * S2 * S2);
    P.dp1 = device_array<float>(N * C1 * Q1 * Q1);
    P.dc1 = device_array<float>(N * C1 * S1 * S1);
    P.loss = device_array<float>(1);
    P.y = device_array<int>(N);
    P.h_loss = pinned_array<float>(1);
    P.h_y = pinned_array<int>(N);

    size_t need = P.ws_bytes;
    P.bwd_data2 = data_algo(w2d.get(), P.c2d.get(), P.p1d.get(), "conv2 backward data", need);
    P.bwd_filter1 = filter_algo(P.xd.get(), P.c1d.get(), w1d.get(), "conv1 backward filter", need);
    P.bwd_filter2 = filter_algo(P.p1d.get(), P.c2d.get(), w2d.get(), "conv2 backward filter", need);
    if (need > P.ws_bytes) {   // a bigger workspace moves it: graphs captured with the old one are dropped
        P.io_graph.reset();
        P.forward_graph.reset();
        P.ws.reset();
        P.ws = device_array<char>(need);
        P.ws_bytes = need;
    }
    P.trains = true;
}

void CudnnNet::Impl::copy_in(Plan& P) {
    LENET_CHECK(cudaMemcpyAsync(P.x.get(), P.h_x.get(), size_t(P.n) * IMG * sizeof(float), cudaMemcpyHostToDevice, s()));
}

void CudnnNet::Impl::copy_out(Plan& P) {
    LENET_CHECK(cudaMemcpyAsync(P.h_lo.get(), P.lo.get(), size_t(P.n) * OUT * sizeof(float), cudaMemcpyDeviceToHost, s()));
}

// The forward pass, enqueued on the stream: x -> logits.
template <class Mark>
void CudnnNet::Impl::forward_calls(Plan& P, Mark mark) {
    cudnnHandle_t h = cudnn.get();
    cublasHandle_t b = cublas.get();
    const int n = P.n;
    // conv1: c1 (n,20,24,24) = x (n,1,28,28) ⋆ conv1.weight (20,1,5,5) + conv1.bias
    LENET_CHECK(cudnnConvolutionForward(h, &ONE, P.xd.get(), P.x.get(), w1d.get(), p[W1].get(), conv.get(), P.fwd1,
                                        P.ws.get(), P.ws_bytes, &ZERO, P.c1d.get(), P.c1.get()));
    LENET_CHECK(cudnnAddTensor(h, &ONE, b1d.get(), p[B1].get(), &ONE, P.c1d.get(), P.c1.get()));
    mark("conv1");
    // pool1: p1 (n,20,12,12) = max over 2x2 windows of c1
    LENET_CHECK(cudnnPoolingForward(h, pool.get(), &ONE, P.c1d.get(), P.c1.get(), &ZERO, P.p1d.get(), P.p1.get()));
    mark("pool1");
    // conv2: c2 (n,50,8,8) = p1 ⋆ conv2.weight (50,20,5,5) + conv2.bias
    LENET_CHECK(cudnnConvolutionForward(h, &ONE, P.p1d.get(), P.p1.get(), w2d.get(), p[W2].get(), conv.get(), P.fwd2,
                                        P.ws.get(), P.ws_bytes, &ZERO, P.c2d.get(), P.c2.get()));
    LENET_CHECK(cudnnAddTensor(h, &ONE, b2d.get(), p[B2].get(), &ONE, P.c2d.get(), P.c2.get()));
    mark("conv2");
    // pool2: p2 (n,50,4,4), read below as flat (n,800) in (c, h, w) order
    LENET_CHECK(cudnnPoolingForward(h, pool.get(), &ONE, P.c2d.get(), P.c2.get(), &ZERO, P.p2d.get(), P.p2.get()));
    mark("pool2");
    // fc1: f1 (n,500) = relu(flat · fc1.weightᵀ + fc1.bias); ReLU in place
    LENET_CHECK(cublasSgemm(b, CUBLAS_OP_T, CUBLAS_OP_N, HID, n, FLAT, &ONE, p[F1].get(), FLAT, P.p2.get(), FLAT, &ZERO,
                            P.f1.get(), HID));
    LENET_CHECK(cudnnAddTensor(h, &ONE, fb1d.get(), p[FB1].get(), &ONE, P.f1d.get(), P.f1.get()));
    LENET_CHECK(cudnnActivationForward(h, relu.get(), &ONE, P.f1d.get(), P.f1.get(), &ZERO, P.f1d.get(), P.f1.get()));
    mark("fc1");
    // fc2: logits (n,10) = f1 · fc2.weightᵀ + fc2.bias
    LENET_CHECK(cublasSgemm(b, CUBLAS_OP_T, CUBLAS_OP_N, OUT, n, HID, &ONE, p[F2].get(), HID, P.f1.get(), HID, &ZERO,
                            P.lo.get(), OUT));
    LENET_CHECK(cudnnAddTensor(h, &ONE, fb2d.get(), p[FB2].get(), &ONE, P.lod.get(), P.lo.get()));
    mark("fc2");
}

void CudnnNet::Impl::run(Plan& P) {   // what forward() enqueues
    if (graph_path(P)) {
        if (!P.io_graph) {
            copy_in(P);   // one plain run first: kernels load and cuDNN engines compile outside the capture
            forward_calls(P);
            copy_out(P);
            LENET_CHECK(cudaStreamSynchronize(s()));
            P.io_graph = capture([&] {
                copy_in(P);
                forward_calls(P);
                copy_out(P);
            });
        }
        LENET_CHECK(cudaGraphLaunch(P.io_graph.get(), s()));
    } else {
        forward_calls(P);
    }
}

// What enqueue() puts on the stream, captured and instantiated as one CUDA graph (over fixed buffers).
template <class Enqueue>
GraphExec CudnnNet::Impl::capture(Enqueue enqueue) {
    LENET_CHECK(cudaStreamBeginCapture(s(), cudaStreamCaptureModeThreadLocal));
    try {
        enqueue();
    } catch (...) {   // end the capture so the stream stays usable, then report the failed call
        cudaGraph_t broken = nullptr;
        (void)cudaStreamEndCapture(s(), &broken);
        Graph drop(broken);
        throw;
    }
    cudaGraph_t g = nullptr;
    LENET_CHECK(cudaStreamEndCapture(s(), &g));
    Graph graph(g);   // the instantiated graph does not need it
    cudaGraphExec_t e = nullptr;
    LENET_CHECK(cudaGraphInstantiate(&e, g, 0));   // overloaded, so not LENET_OWN
    return GraphExec(e);
}

float CudnnNet::Impl::train(const float* images, const int* labels, int n, float lr) {
    settle();
    staged = 0;   // the staging buffers now hold this batch
    Plan& P = plan(n);
    if (!P.trains) plan_training(P);
    cudnnHandle_t h = cudnn.get();
    cublasHandle_t b = cublas.get();
    const float neg_lr = -lr;
    std::memcpy(P.h_x.get(), images, size_t(n) * IMG * sizeof(float));
    std::memcpy(P.h_y.get(), labels, size_t(n) * sizeof(int));
    pending = true;
    copy_in(P);
    LENET_CHECK(cudaMemcpyAsync(P.y.get(), P.h_y.get(), size_t(n) * sizeof(int), cudaMemcpyHostToDevice, s()));
    forward_calls(P);

    // loss and dlogits (n,10) = (softmax - onehot(y)) / n, from logp = log_softmax(logits)
    LENET_CHECK(cudnnSoftmaxForward(h, CUDNN_SOFTMAX_LOG, CUDNN_SOFTMAX_MODE_INSTANCE, &ONE, P.lod.get(), P.lo.get(),
                                    &ZERO, P.lod.get(), P.logp.get()));
    // xent_grad<<<1, 256, 0, s()>>>(logp, y, n, dlo, loss), spelled as the runtime call it stands for,
    // so that g++ compiles this file too (the stand-in build, docs/cudnn-standin.md)
    const float* logp = P.logp.get();
    const int* labels_d = P.y.get();
    float *dlo = P.dlo.get(), *loss = P.loss.get();
    void* args[] = {&logp, &labels_d, &n, &dlo, &loss};
    LENET_CHECK(cudaLaunchKernel(xent_grad, dim3(1), dim3(256), args, 0, s()));
    LENET_CHECK(cudaMemcpyAsync(P.h_loss.get(), P.loss.get(), sizeof(float), cudaMemcpyDeviceToHost, s()));

    // fc2: df1 (n,500) = dlo · fc2.weight; then fc2.weight += -lr·dloᵀ·f1, fc2.bias += -lr·Σ_n dlo
    LENET_CHECK(cublasSgemm(b, CUBLAS_OP_N, CUBLAS_OP_N, HID, n, OUT, &ONE, p[F2].get(), HID, P.dlo.get(), OUT, &ZERO,
                            P.df1.get(), HID));
    LENET_CHECK(cublasSgemm(b, CUBLAS_OP_N, CUBLAS_OP_T, HID, OUT, n, &neg_lr, P.f1.get(), HID, P.dlo.get(), OUT, &ONE,
                            p[F2].get(), HID));
    LENET_CHECK(cudnnConvolutionBackwardBias(h, &neg_lr, P.lod.get(), P.dlo.get(), &ONE, fb2d.get(), p[FB2].get()));
    // ReLU: df1 *= (f1 > 0), in place (f1 holds the ReLU output, positive exactly where its input was)
    LENET_CHECK(cudnnActivationBackward(h, relu.get(), &ONE, P.f1d.get(), P.f1.get(), P.f1d.get(), P.df1.get(),
                                        P.f1d.get(), P.f1.get(), &ZERO, P.f1d.get(), P.df1.get()));
    // fc1: dp2 (n,800) = df1 · fc1.weight; then fc1.weight += -lr·df1ᵀ·flat, fc1.bias += -lr·Σ_n df1
    LENET_CHECK(cublasSgemm(b, CUBLAS_OP_N, CUBLAS_OP_N, FLAT, n, HID, &ONE, p[F1].get(), FLAT, P.df1.get(), HID, &ZERO,
                            P.dp2.get(), FLAT));
    LENET_CHECK(cublasSgemm(b, CUBLAS_OP_N, CUBLAS_OP_T, FLAT, HID, n, &neg_lr, P.p2.get(), FLAT, P.df1.get(), HID, &ONE,
                            p[F1].get(), FLAT));
    LENET_CHECK(cudnnConvolutionBackwardBias(h, &neg_lr, P.f1d.get(), P.df1.get(), &ONE, fb1d.get(), p[FB1].get()));
    // pool2: dc2 (n,50,8,8), each gradient to the maximum of its window
    LENET_CHECK(cudnnPoolingBackward(h, pool.get(), &ONE, P.p2d.get(), P.p2.get(), P.p2d.get(), P.dp2.get(), P.c2d.get(),
                                     P.c2.get(), &ZERO, P.c2d.get(), P.dc2.get()));
    // conv2: dp1 (n,20,12,12) with the old weights; then conv2.weight += -lr·dW, conv2.bias += -lr·Σ dc2
    LENET_CHECK(cudnnConvolutionBackwardData(h, &ONE, w2d.get(), p[W2].get(), P.c2d.get(), P.dc2.get(), conv.get(),
                                             P.bwd_data2, P.ws.get(), P.ws_bytes, &ZERO, P.p1d.get(), P.dp1.get()));
    LENET_CHECK(cudnnConvolutionBackwardFilter(h, &neg_lr, P.p1d.get(), P.p1.get(), P.c2d.get(), P.dc2.get(), conv.get(),
                                               P.bwd_filter2, P.ws.get(), P.ws_bytes, &ONE, w2d.get(), p[W2].get()));
    LENET_CHECK(cudnnConvolutionBackwardBias(h, &neg_lr, P.c2d.get(), P.dc2.get(), &ONE, b2d.get(), p[B2].get()));
    // pool1: dc1 (n,20,24,24)
    LENET_CHECK(cudnnPoolingBackward(h, pool.get(), &ONE, P.p1d.get(), P.p1.get(), P.p1d.get(), P.dp1.get(), P.c1d.get(),
                                     P.c1.get(), &ZERO, P.c1d.get(), P.dc1.get()));
    // conv1: conv1.weight += -lr·dW, conv1.bias += -lr·Σ dc1 (no input gradient needed)
    LENET_CHECK(cudnnConvolutionBackwardFilter(h, &neg_lr, P.xd.get(), P.x.get(), P.c1d.get(), P.dc1.get(), conv.get(),
                                               P.bwd_filter1, P.ws.get(), P.ws_bytes, &ONE, w1d.get(), p[W1].get()));
    LENET_CHECK(cudnnConvolutionBackwardBias(h, &neg_lr, P.c1d.get(), P.dc1.get(), &ONE, b1d.get(), p[B1].get()));

    LENET_CHECK(cudaStreamSynchronize(s()));   // the one host wait of a step: the loss
    pending = false;
    return *P.h_loss.get();
}

// --- the public interface ---------------------------------------------------------------------------

CudnnNet::CudnnNet(const float* const params[NUM_TENSORS], bool use_graph, bool deterministic)
    : impl_(std::make_unique<Impl>(params, use_graph, deterministic)) {}

CudnnNet::~CudnnNet() {
    if (impl_) (void)cudaStreamSynchronize(impl_->s());   // nothing may still use what is freed below
}

void CudnnNet::upload(const float* images, int n) {
    Impl& I = *impl_;
    I.settle();
    I.staged = 0;
    Plan& P = I.plan(n);
    std::memcpy(P.h_x.get(), images, size_t(n) * IMG * sizeof(float));
    if (!I.graph_path(P)) {
        I.pending = true;
        I.copy_in(P);   // the graph path copies inside the graph
    }
    I.staged = n;
    I.ran = false;
}

void CudnnNet::forward(int n) {
    Impl& I = *impl_;
    if (I.staged != n) throw std::invalid_argument("forward(" + std::to_string(n) + "): upload a batch of that size first");
    I.pending = true;
    I.run(I.plan(n));
    I.ran = true;
}

void CudnnNet::download(float* logits, int n) {
    Impl& I = *impl_;
    if (I.staged != n || !I.ran)
        throw std::invalid_argument("download(" + std::to_string(n) + "): run forward on a batch of that size first");
    Plan& P = I.plan(n);
    if (!I.graph_path(P)) I.copy_out(P);
    LENET_CHECK(cudaStreamSynchronize(I.s()));
    I.pending = false;
    std::memcpy(logits, P.h_lo.get(), size_t(n) * OUT * sizeof(float));
}

void CudnnNet::synchronize() {
    LENET_CHECK(cudaStreamSynchronize(impl_->s()));
    impl_->pending = false;
}

float CudnnNet::train_step(const float* images, const int* labels, int n, float lr) {
    return impl_->train(images, labels, n, lr);
}

void CudnnNet::parameters(float* const out[NUM_TENSORS]) {
    Impl& I = *impl_;
    I.settle();
    for (int t = 0; t < NUM_TENSORS; ++t)
        LENET_CHECK(cudaMemcpyAsync(out[t], I.p[t].get(), elements(t) * sizeof(float), cudaMemcpyDeviceToHost, I.s()));
    LENET_CHECK(cudaStreamSynchronize(I.s()));
}

// CUDA-event times of the forward, the H2D and D2H copies excluded (lenet.net.Net.device_times_us):
//   forward  the forward as forward() enqueues it: plain, the cuDNN/cuBLAS calls one launch at a time
//            (the host's launch gaps count); the graph path at batch 1 replays a graph, timed here
//            without its two copies, so it equals "kernels" there
//   kernels  the same calls captured once as a copy-free CUDA graph and replayed
// The two are interleaved, `repeats` of each.
DeviceTimes CudnnNet::device_times_us(const float* images, int n, int repeats) {
    Impl& I = *impl_;
    upload(images, n);
    forward(n);   // warm: plans, captures the graph where it applies, and leaves the images on the device
    synchronize();
    Plan& P = I.plan(n);
    if (!P.forward_graph) P.forward_graph = I.capture([&] { I.forward_calls(P); });
    const auto timed = [&](auto enqueue) {
        LENET_CHECK(cudaEventRecord(I.start.get(), I.s()));
        enqueue();
        LENET_CHECK(cudaEventRecord(I.stop.get(), I.s()));
        LENET_CHECK(cudaEventSynchronize(I.stop.get()));
        float ms = 0;
        LENET_CHECK(cudaEventElapsedTime(&ms, I.start.get(), I.stop.get()));
        return ms * 1000.0f;
    };
    const auto replay = [&] { LENET_CHECK(cudaGraphLaunch(P.forward_graph.get(), I.s())); };
    DeviceTimes us;
    for (int r = 0; r < repeats; ++r) {
        us.forward.push_back(I.graph_path(P) ? timed(replay) : timed([&] { I.forward_calls(P); }));
        us.kernels.push_back(timed(replay));
    }
    synchronize();
    return us;
}

// CUDA-event times of each layer's calls in the forward at batch 1, enqueued one by one (no graph),
// an event recorded after each layer (lenet.net.Net.layer_times_us): {layer: [µs per repeat]}.
std::vector<std::pair<std::string, std::vector<double>>> CudnnNet::layer_times_us(const float* image, int repeats) {
    Impl& I = *impl_;
    upload(image, 1);
    forward(1);   // warm, and leaves the image on the device
    synchronize();
    Plan& P = I.plan(1);
    const Event first = LENET_OWN(Event, cudaEventCreateWithFlags, cudaEventDefault);
    std::vector<Event> after;   // one per layer, made in the first repeat
    std::vector<std::pair<std::string, std::vector<double>>> us;
    for (int r = 0; r < repeats; ++r) {
        size_t layer = 0;
        LENET_CHECK(cudaEventRecord(first.get(), I.s()));
        I.forward_calls(P, [&](const char* name) {
            if (r == 0) {
                after.push_back(LENET_OWN(Event, cudaEventCreateWithFlags, cudaEventDefault));
                us.emplace_back(name, std::vector<double>{});
            }
            LENET_CHECK(cudaEventRecord(after[layer++].get(), I.s()));
        });
        LENET_CHECK(cudaEventSynchronize(after.back().get()));
        for (size_t k = 0; k < after.size(); ++k) {
            float ms = 0;
            LENET_CHECK(cudaEventElapsedTime(&ms, k ? after[k - 1].get() : first.get(), after[k].get()));
            us[k].second.push_back(ms * 1000.0);
        }
    }
    synchronize();
    return us;
}

int CudnnNet::plans_made() const { return impl_->plans_made; }

std::string CudnnNet::describe() const {
    std::vector<const Plan*> cached{impl_->one.get()};
    for (const auto& P : impl_->plans) cached.push_back(P.get());
    std::string out;
    for (const Plan* P : cached) {
        if (!P) continue;
        out += "batch " + std::to_string(P->n) + ": conv1/conv2 forward algo " + std::to_string(P->fwd1) + "/" +
               std::to_string(P->fwd2);
        if (P->trains)
            out += ", conv2 backward data algo " + std::to_string(P->bwd_data2) + ", conv1/conv2 backward filter algo " +
                   std::to_string(P->bwd_filter1) + "/" + std::to_string(P->bwd_filter2);
        out += ", workspace " + std::to_string(P->ws_bytes) + " B" + (P->io_graph ? ", graph captured" : "") + "\n";
    }
    return out;
}

std::pair<size_t, size_t> cuda_mem_info() {
    size_t free = 0, total = 0;
    LENET_CHECK(cudaMemGetInfo(&free, &total));
    return {free, total};
}

}  // namespace lenet
