// The stand-in cuDNN convolutions: forward, backward data, backward filter, backward bias, their Find*
// and workspace queries. Every algorithm computes the same plain maths; the non-deterministic ones
// (cudnn_ops_v9.h: BWD_DATA_ALGO_0, BWD_FILTER_ALGO_0 and _3, "Non-deterministic") change their
// summation order from call to call, as atomic adds do.
#include <algorithm>
#include <cstring>
#include <vector>

#include "cudnn_types.h"

namespace lenet::emu {
namespace {

enum Op { FWD, BWD_DATA, BWD_FILTER };
const char* const WORKSPACE_QUERY[] = {"cudnnGetConvolutionForwardWorkspaceSize",
                                       "cudnnGetConvolutionBackwardDataWorkspaceSize",
                                       "cudnnGetConvolutionBackwardFilterWorkspaceSize"};
const int ALGO_COUNT[] = {CUDNN_CONVOLUTION_FWD_ALGO_COUNT, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT};

struct Geometry {
    int N, C, H, W, K, R, S, OH, OW, ph, pw, u, v, dh, dw;
    bool flip;   // CUDNN_CONVOLUTION flips the filter; CUDNN_CROSS_CORRELATION does not
};
Geometry geometry(const cudnnTensorStruct& x, const cudnnFilterStruct& w, const cudnnConvolutionStruct& cv,
                  const cudnnTensorStruct& y) {
    return {x.n, x.c, x.h, x.w, w.k, w.h, w.w, y.h, y.w, cv.pad_h, cv.pad_w, cv.u, cv.v, cv.dil_h, cv.dil_w,
            cv.mode == CUDNN_CONVOLUTION};
}

// Workspace bytes of each algorithm the stand-in runs (-1: not supported), as Get*WorkspaceSize reports.
long long workspace(Op op, int algo, const Geometry& g) {
    const long long col = 4ll * g.C * g.R * g.S * g.OH * g.OW;   // one image's im2col matrix
    if (op == FWD) {
        if (algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM) return 0;
        if (algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM) return 4ll * g.C * g.R * g.S;
        if (algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM) return col;
    } else if (op == BWD_DATA) {
        if (algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) return 0;
        if (algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1) return col;
    } else {
        if (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0) return 0;
        if (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1) return col;
        if (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3) return 4ll * g.C * g.R * g.S;
    }
    return -1;
}

bool nondeterministic(Op op, int algo) {
    return (op == BWD_DATA && algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) ||
           (op == BWD_FILTER &&
            (algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3));
}

// Find* results, "sorted by execution time" and awkward on purpose: a tensor-op entry first, failed
// entries and (for backward) non-deterministic ones ahead of the deterministic FP32 ones.
struct Entry {
    int algo;
    cudnnStatus_t status;
    cudnnMathType_t math;
};
std::vector<Entry> find_list(Op op) {
    const cudnnStatus_t OK = CUDNN_STATUS_SUCCESS, NO = CUDNN_STATUS_NOT_SUPPORTED;
    const cudnnMathType_t TC = CUDNN_TENSOR_OP_MATH, FMA = CUDNN_FMA_MATH, DEF = CUDNN_DEFAULT_MATH;
    if (op == FWD)
        return {{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, OK, TC}, {CUDNN_CONVOLUTION_FWD_ALGO_FFT, NO, FMA},
                {CUDNN_CONVOLUTION_FWD_ALGO_GEMM, OK, FMA}, {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, OK, DEF},
                {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, OK, FMA}, {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, NO, FMA}};
    if (op == BWD_DATA)
        return {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, OK, TC}, {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, OK, FMA},
                {CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT, NO, FMA}, {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, OK, FMA}};
    return {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, OK, TC}, {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, OK, FMA},
            {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, OK, DEF}, {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT, NO, FMA},
            {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, OK, FMA}};
}

// Find* (timed: `timed`) or Get*_v7 (the heuristics' ranking, nothing run): the same awkward list.
template <class Perf>
void find(Op op, const Geometry& g, int requested, int* returned, Perf* perf, bool timed = true) {
    require(requested > 0, BAD, "requestedAlgoCount must be positive");
    require(returned && perf, BAD, "returnedAlgoCount or perfResults is NULL");
    if (timed) {
        // "This function is host blocking": it waits for the device and runs every algorithm,
        // allocating their workspaces, which a capture does not permit.
        forbid_during_capture("runs and times the algorithms (host blocking, allocates)", CUDNN_STATUS_NOT_SUPPORTED);
        synchronize_all();
    }
    const std::vector<Entry> list = find_list(op);
    const int count = std::min<int>(requested, int(list.size()));
    for (int i = 0; i < count; ++i) {
        Perf& p = perf[i];
        std::memset(&p, 0, sizeof p);
        p.algo = decltype(p.algo)(list[i].algo);
        p.status = list[i].status;
        p.time = timed && list[i].status == CUDNN_STATUS_SUCCESS ? 0.01f * float(i + 1) : -1.0f;
        p.memory = list[i].status == CUDNN_STATUS_SUCCESS ? size_t(workspace(op, list[i].algo, g)) : 0;
        p.determinism = nondeterministic(op, list[i].algo) ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC;
        p.mathType = list[i].math;
    }
    *returned = count;
}

size_t need_algo(Op op, int algo, const Geometry& g) {
    require(algo >= 0 && algo < ALGO_COUNT[op], BAD, "algo " + std::to_string(algo) + ": invalid enumerant");
    const long long bytes = workspace(op, algo, g);
    require(bytes >= 0, UNSUPPORTED, "algo " + std::to_string(algo) + " is not supported for these descriptors");
    return size_t(bytes);
}

// The workspace of an execution call: at least what the matching Get*WorkspaceSize returned, and a live
// device allocation of workSpaceSizeInBytes ("Specifies the size in bytes of the provided workSpace").
size_t need_workspace(Op op, int algo, const Geometry& g, const void* ws, size_t bytes) {
    const size_t need = need_algo(op, algo, g);
    require(bytes >= need, BAD, "workSpaceSizeInBytes " + std::to_string(bytes) + " is less than the " +
                                    std::to_string(need) + " bytes " + WORKSPACE_QUERY[op] + " returns for algo " +
                                    std::to_string(algo));
    if (ws || need) need_device(ws, bytes, BAD, "workSpace of workSpaceSizeInBytes");
    return need;
}

void scribble(void* ws, size_t need) {   // the algorithm uses its scratch: the whole of it, with garbage
    if (need) {
        need_device(ws, need, cudaErrorIllegalAddress, "workSpace (at execution)");
        std::memset(ws, 0xab, need);
        mark_written(ws, need);
    }
}

unsigned rotation = 0;   // the changing summation order of the non-deterministic algorithms

// The valid output columns [lo, hi) for filter column s: input column ow*v + off inside [0, W).
void columns(const Geometry& g, int s, int& off, int& lo, int& hi) {
    off = s * g.dw - g.pw;
    lo = off >= 0 ? 0 : (-off + g.v - 1) / g.v;
    hi = g.W - 1 - off < 0 ? 0 : std::min(g.OW, (g.W - 1 - off) / g.v + 1);
}
int tap(const Geometry& g, int k, int c, int r, int s) {   // the stored filter element used for tap (r, s)
    const int rr = g.flip ? g.R - 1 - r : r, ss = g.flip ? g.S - 1 - s : s;
    return ((k * g.C + c) * g.R + rr) * g.S + ss;
}

// y = x ⋆ w, (N, K, OH, OW)
std::vector<float> forward(const Geometry& g, const float* x, const float* w) {
    std::vector<float> y(size_t(g.N) * g.K * g.OH * g.OW, 0.0f);
    for (int n = 0; n < g.N; ++n)
        for (int k = 0; k < g.K; ++k) {
            float* o = &y[(size_t(n) * g.K + k) * g.OH * g.OW];
            for (int c = 0; c < g.C; ++c)
                for (int r = 0; r < g.R; ++r)
                    for (int s = 0; s < g.S; ++s) {
                        const float wv = w[tap(g, k, c, r, s)];
                        int off, lo, hi;
                        columns(g, s, off, lo, hi);
                        for (int oh = 0; oh < g.OH; ++oh) {
                            const int ih = oh * g.u - g.ph + r * g.dh;
                            if (ih < 0 || ih >= g.H) continue;
                            const float* xr = x + ((size_t(n) * g.C + c) * g.H + ih) * g.W;
                            float* orow = o + size_t(oh) * g.OW;
                            for (int ow = lo; ow < hi; ++ow) orow[ow] += wv * xr[ow * g.v + off];
                        }
                    }
        }
    return y;
}

// dx = dy ⋆ᵀ w, (N, C, H, W); the output channels k in `first`-rotated order
std::vector<float> backward_data(const Geometry& g, const float* w, const float* dy, int first) {
    std::vector<float> dx(size_t(g.N) * g.C * g.H * g.W, 0.0f);
    for (int n = 0; n < g.N; ++n)
        for (int c = 0; c < g.C; ++c) {
            float* d = &dx[(size_t(n) * g.C + c) * g.H * g.W];
            for (int kk = 0; kk < g.K; ++kk) {
                const int k = (kk + first) % g.K;
                for (int r = 0; r < g.R; ++r)
                    for (int s = 0; s < g.S; ++s) {
                        const float wv = w[tap(g, k, c, r, s)];
                        int off, lo, hi;
                        columns(g, s, off, lo, hi);
                        for (int oh = 0; oh < g.OH; ++oh) {
                            const int ih = oh * g.u - g.ph + r * g.dh;
                            if (ih < 0 || ih >= g.H) continue;
                            const float* dyr = dy + ((size_t(n) * g.K + k) * g.OH + oh) * g.OW;
                            float* dr = d + size_t(ih) * g.W;
                            for (int ow = lo; ow < hi; ++ow) dr[ow * g.v + off] += wv * dyr[ow];
                        }
                    }
            }
        }
    return dx;
}

// dw (K, C, R, S) in stored order = Σ_n Σ_oh,ow dy · x, the images in `first`-rotated order
std::vector<float> backward_filter(const Geometry& g, const float* x, const float* dy, int first) {
    std::vector<float> dw(size_t(g.K) * g.C * g.R * g.S, 0.0f);
    for (int k = 0; k < g.K; ++k)
        for (int c = 0; c < g.C; ++c)
            for (int r = 0; r < g.R; ++r)
                for (int s = 0; s < g.S; ++s) {
                    int off, lo, hi;
                    columns(g, s, off, lo, hi);
                    double sum = 0;
                    for (int nn = 0; nn < g.N; ++nn) {
                        const int n = (nn + first) % g.N;
                        float part = 0;
                        for (int oh = 0; oh < g.OH; ++oh) {
                            const int ih = oh * g.u - g.ph + r * g.dh;
                            if (ih < 0 || ih >= g.H) continue;
                            const float* xr = x + ((size_t(n) * g.C + c) * g.H + ih) * g.W;
                            const float* dyr = dy + ((size_t(n) * g.K + k) * g.OH + oh) * g.OW;
                            for (int ow = lo; ow < hi; ++ow) part += dyr[ow] * xr[ow * g.v + off];
                        }
                        sum += part;
                    }
                    dw[tap(g, k, c, r, s)] = float(sum);
                }
    return dw;
}

void store(const Arg& out, const std::vector<float>& result, float alpha, float beta) {
    float* y = const_cast<float*>(out.p);
    for (size_t i = 0; i < result.size(); ++i) blend(y, i, alpha, result[i], beta);
}

}  // namespace
}  // namespace lenet::emu

using namespace lenet::emu;

// The checks every workspace query and Find* shares: live descriptors whose shapes agree.
static Geometry checked(cudnnHandle_t h, cudnnTensorDescriptor_t xd, cudnnFilterDescriptor_t wd,
                        cudnnConvolutionDescriptor_t cd, cudnnTensorDescriptor_t yd, const char* x_name,
                        const char* y_name) {
    handle(h);
    const auto x = tensor(xd, x_name), y = tensor(yd, y_name);
    const auto w = filter(wd, "w");
    const auto cv = convolution(cd);
    need_conv_shapes(x, w, cv, y, x_name, y_name);
    return geometry(x, w, cv, y);
}

static void size_of(Op op, int algo, const Geometry& g, size_t* bytes) {
    require(bytes != nullptr, BAD, "sizeInBytes is NULL");
    *bytes = need_algo(op, algo, g);
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                      const cudnnFilterDescriptor_t wd,
                                                      const cudnnConvolutionDescriptor_t cd,
                                                      const cudnnTensorDescriptor_t yd, cudnnConvolutionFwdAlgo_t algo,
                                                      size_t* bytes) {
    return api<cudnnStatus_t>(WORKSPACE_QUERY[FWD], [&] { size_of(FWD, algo, checked(h, xd, wd, cd, yd, "x", "y"), bytes); });
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t h, const cudnnFilterDescriptor_t wd,
                                                           const cudnnTensorDescriptor_t dyd,
                                                           const cudnnConvolutionDescriptor_t cd,
                                                           const cudnnTensorDescriptor_t dxd,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* bytes) {
    return api<cudnnStatus_t>(WORKSPACE_QUERY[BWD_DATA],
                              [&] { size_of(BWD_DATA, algo, checked(h, dxd, wd, cd, dyd, "dx", "dy"), bytes); });
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                             const cudnnTensorDescriptor_t dyd,
                                                             const cudnnConvolutionDescriptor_t cd,
                                                             const cudnnFilterDescriptor_t dwd,
                                                             cudnnConvolutionBwdFilterAlgo_t algo, size_t* bytes) {
    return api<cudnnStatus_t>(WORKSPACE_QUERY[BWD_FILTER],
                              [&] { size_of(BWD_FILTER, algo, checked(h, xd, dwd, cd, dyd, "x", "dy"), bytes); });
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithm(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                   const cudnnFilterDescriptor_t wd,
                                                   const cudnnConvolutionDescriptor_t cd,
                                                   const cudnnTensorDescriptor_t yd, const int requested,
                                                   int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
    return api<cudnnStatus_t>("cudnnFindConvolutionForwardAlgorithm",
                              [&] { find(FWD, checked(h, xd, wd, cd, yd, "x", "y"), requested, returned, perf); });
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithm(cudnnHandle_t h, const cudnnFilterDescriptor_t wd,
                                                        const cudnnTensorDescriptor_t dyd,
                                                        const cudnnConvolutionDescriptor_t cd,
                                                        const cudnnTensorDescriptor_t dxd, const int requested,
                                                        int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
    return api<cudnnStatus_t>("cudnnFindConvolutionBackwardDataAlgorithm",
                              [&] { find(BWD_DATA, checked(h, dxd, wd, cd, dyd, "dx", "dy"), requested, returned, perf); });
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithm(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                          const cudnnTensorDescriptor_t dyd,
                                                          const cudnnConvolutionDescriptor_t cd,
                                                          const cudnnFilterDescriptor_t dwd, const int requested,
                                                          int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
    return api<cudnnStatus_t>("cudnnFindConvolutionBackwardFilterAlgorithm",
                              [&] { find(BWD_FILTER, checked(h, xd, dwd, cd, dyd, "x", "dy"), requested, returned, perf); });
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                     const cudnnFilterDescriptor_t wd,
                                                     const cudnnConvolutionDescriptor_t cd,
                                                     const cudnnTensorDescriptor_t yd, const int requested,
                                                     int* returned, cudnnConvolutionFwdAlgoPerf_t* perf) {
    return api<cudnnStatus_t>("cudnnGetConvolutionForwardAlgorithm_v7",
                              [&] { find(FWD, checked(h, xd, wd, cd, yd, "x", "y"), requested, returned, perf, false); });
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(cudnnHandle_t h, const cudnnFilterDescriptor_t wd,
                                                          const cudnnTensorDescriptor_t dyd,
                                                          const cudnnConvolutionDescriptor_t cd,
                                                          const cudnnTensorDescriptor_t dxd, const int requested,
                                                          int* returned, cudnnConvolutionBwdDataAlgoPerf_t* perf) {
    return api<cudnnStatus_t>("cudnnGetConvolutionBackwardDataAlgorithm_v7", [&] {
        find(BWD_DATA, checked(h, dxd, wd, cd, dyd, "dx", "dy"), requested, returned, perf, false);
    });
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t h, const cudnnTensorDescriptor_t xd,
                                                            const cudnnTensorDescriptor_t dyd,
                                                            const cudnnConvolutionDescriptor_t cd,
                                                            const cudnnFilterDescriptor_t dwd, const int requested,
                                                            int* returned, cudnnConvolutionBwdFilterAlgoPerf_t* perf) {
    return api<cudnnStatus_t>("cudnnGetConvolutionBackwardFilterAlgorithm_v7", [&] {
        find(BWD_FILTER, checked(h, xd, dwd, cd, dyd, "x", "dy"), requested, returned, perf, false);
    });
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                      const void* xp, const cudnnFilterDescriptor_t wd, const void* wp,
                                      const cudnnConvolutionDescriptor_t cd, cudnnConvolutionFwdAlgo_t algo, void* ws,
                                      size_t ws_bytes, const void* beta, const cudnnTensorDescriptor_t yd, void* yp) {
    return api<cudnnStatus_t>("cudnnConvolutionForward", [&] {
        handle(h);
        const float a = host_scalar(alpha, BAD, "alpha"), b = host_scalar(beta, BAD, "beta");
        const Arg x = arg(xd, xp, "x"), y = arg(yd, yp, "y");
        const auto w = filter(wd, "w");
        const auto cv = convolution(cd);
        need_device(wp, w.count() * 4, BAD, "w");
        need_conv_shapes(x.t, w, cv, y.t, "x", "y");
        no_overlap(y, x);
        const Geometry g = geometry(x.t, w, cv, y.t);
        const size_t need = need_workspace(FWD, algo, g, ws, ws_bytes);
        const Arg wa{cudnnTensorStruct{true, w.k, w.c, w.h, w.w}, static_cast<const float*>(wp), "w"};
        launch(h, {y}, [=] {
            need_inputs({x, wa});
            need_prior(y, b);
            scribble(ws, need);
            store(y, forward(g, x.p, wa.p), a, b);
        }, "cudnnConvolutionForward");
    });
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t h, const void* alpha, const cudnnFilterDescriptor_t wd,
                                           const void* wp, const cudnnTensorDescriptor_t dyd, const void* dyp,
                                           const cudnnConvolutionDescriptor_t cd, cudnnConvolutionBwdDataAlgo_t algo,
                                           void* ws, size_t ws_bytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxd, void* dxp) {
    return api<cudnnStatus_t>("cudnnConvolutionBackwardData", [&] {
        handle(h);
        const float a = host_scalar(alpha, BAD, "alpha"), b = host_scalar(beta, BAD, "beta");
        const Arg dy = arg(dyd, dyp, "dy"), dx = arg(dxd, dxp, "dx");
        const auto w = filter(wd, "w");
        const auto cv = convolution(cd);
        need_device(wp, w.count() * 4, BAD, "w");
        need_conv_shapes(dx.t, w, cv, dy.t, "dx", "dy");
        no_overlap(dx, dy);
        const Geometry g = geometry(dx.t, w, cv, dy.t);
        const size_t need = need_workspace(BWD_DATA, algo, g, ws, ws_bytes);
        const Arg wa{cudnnTensorStruct{true, w.k, w.c, w.h, w.w}, static_cast<const float*>(wp), "w"};
        const int first = nondeterministic(BWD_DATA, algo) ? int(rotation++ % unsigned(g.K)) : 0;
        launch(h, {dx}, [=] {
            need_inputs({dy, wa});
            need_prior(dx, b);
            scribble(ws, need);
            store(dx, backward_data(g, wa.p, dy.p, first), a, b);
        }, "cudnnConvolutionBackwardData");
    });
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t xd,
                                             const void* xp, const cudnnTensorDescriptor_t dyd, const void* dyp,
                                             const cudnnConvolutionDescriptor_t cd,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* ws, size_t ws_bytes,
                                             const void* beta, const cudnnFilterDescriptor_t dwd, void* dwp) {
    return api<cudnnStatus_t>("cudnnConvolutionBackwardFilter", [&] {
        handle(h);
        const float a = host_scalar(alpha, BAD, "alpha"), b = host_scalar(beta, BAD, "beta");
        const Arg x = arg(xd, xp, "x"), dy = arg(dyd, dyp, "dy");
        const auto w = filter(dwd, "dw");
        const auto cv = convolution(cd);
        need_conv_shapes(x.t, w, cv, dy.t, "x", "dy");
        const Arg dw{cudnnTensorStruct{true, w.k, w.c, w.h, w.w}, static_cast<const float*>(dwp), "dw"};
        need_device(dwp, dw.bytes(), BAD, "dw");
        no_overlap(dw, x);
        no_overlap(dw, dy);
        const Geometry g = geometry(x.t, w, cv, dy.t);
        const size_t need = need_workspace(BWD_FILTER, algo, g, ws, ws_bytes);
        const int first = nondeterministic(BWD_FILTER, algo) ? int(rotation++ % unsigned(g.N)) : 0;
        launch(h, {dw}, [=] {
            need_inputs({x, dy});
            need_prior(dw, b);
            scribble(ws, need);
            store(dw, backward_filter(g, x.p, dy.p, first), a, b);
        }, "cudnnConvolutionBackwardFilter");
    });
}

cudnnStatus_t cudnnConvolutionBackwardBias(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t dyd,
                                           const void* dyp, const void* beta, const cudnnTensorDescriptor_t dbd,
                                           void* dbp) {
    return api<cudnnStatus_t>("cudnnConvolutionBackwardBias", [&] {
        handle(h);
        const float a = host_scalar(alpha, BAD, "alpha"), b = host_scalar(beta, BAD, "beta");
        const Arg dy = arg(dyd, dyp, "dy"), db = arg(dbd, dbp, "db");
        // BAD_PARAM: "the numbers of feature maps of the input tensor and output tensor differ"; db is 1xCx1x1
        require(db.t == cudnnTensorStruct{true, 1, dy.t.c, 1, 1}, BAD,
                "dbDesc " + db.t.str() + " must be (1, C, 1, 1) for dyDesc " + dy.t.str());
        no_overlap(db, dy);
        launch(h, {db}, [=] {
            need_inputs({dy});
            need_prior(db, b);
            const size_t plane = size_t(dy.t.h) * dy.t.w;
            std::vector<float> sums(size_t(dy.t.c));
            for (int c = 0; c < dy.t.c; ++c) {
                double s = 0;
                for (int n = 0; n < dy.t.n; ++n) {
                    const float* p = dy.p + (size_t(n) * dy.t.c + c) * plane;
                    for (size_t i = 0; i < plane; ++i) s += p[i];
                }
                sums[size_t(c)] = float(s);
            }
            store(db, sums, a, b);
        }, "cudnnConvolutionBackwardBias");
    });
}
