// The stand-in cuDNN's pooling (max), activation (ReLU), softmax and add-tensor calls.
#include <cmath>
#include <limits>
#include <vector>

#include "cudnn_types.h"

namespace lenet::emu {
namespace {

// y dims of pooling x: "outputDim = 1 + (inputDim + 2*padding - windowDim)/poolingStride"
// (cudnnGetPooling2dForwardOutputDim), n and c unchanged.
cudnnTensorStruct pooled(const cudnnTensorStruct& x, const cudnnPoolingStruct& p) {
    return {true, x.n, x.c, 1 + (x.h + 2 * p.pad_h - p.win_h) / p.stride_h, 1 + (x.w + 2 * p.pad_w - p.win_w) / p.stride_w};
}

void need_pooled(const Arg& x, const Arg& y, const cudnnPoolingStruct& p) {
    // BAD_PARAM: "the dimensions n, c of the input tensor and output tensors differ"
    require(x.t.n == y.t.n && x.t.c == y.t.c, BAD, std::string(x.name) + "Desc " + x.t.str() + " and " + y.name +
                                                       "Desc " + y.t.str() + " differ in n or c");
    require(y.t == pooled(x.t, p), BAD, std::string(y.name) + "Desc " + y.t.str() + " is not the pooling output " +
                                            pooled(x.t, p).str() + " (cudnnGetPooling2dForwardOutputDim)");
}

// For each output element, the flat index of the first maximum of its window in x (row-major scan).
template <class Visit>
void windows(const cudnnTensorStruct& x, const cudnnTensorStruct& y, const cudnnPoolingStruct& p, const float* xp,
             Visit visit) {
    for (int nc = 0; nc < x.n * x.c; ++nc)
        for (int oh = 0; oh < y.h; ++oh)
            for (int ow = 0; ow < y.w; ++ow) {
                size_t best = 0;
                float m = -std::numeric_limits<float>::infinity();
                bool any = false;
                for (int r = 0; r < p.win_h; ++r)
                    for (int s = 0; s < p.win_w; ++s) {
                        const int ih = oh * p.stride_h - p.pad_h + r, iw = ow * p.stride_w - p.pad_w + s;
                        if (ih < 0 || ih >= x.h || iw < 0 || iw >= x.w) continue;
                        const size_t i = (size_t(nc) * x.h + ih) * x.w + iw;
                        if (!any || xp[i] > m) best = i, m = xp[i], any = true;
                    }
                visit((size_t(nc) * y.h + oh) * y.w + ow, best, m);
            }
}

}  // namespace
}  // namespace lenet::emu

using namespace lenet::emu;

cudnnStatus_t cudnnPoolingForward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pd, const void* alpha,
                                  const cudnnTensorDescriptor_t xd, const void* xp, const void* beta,
                                  const cudnnTensorDescriptor_t yd, void* yp) {
    return api<cudnnStatus_t>("cudnnPoolingForward", [&] {
        handle(h);
        const auto p = pooling(pd);
        const float a = host_scalar(alpha, BAD, "alpha"), b = host_scalar(beta, BAD, "beta");
        const Arg x = arg(xd, xp, "x"), y = arg(yd, yp, "y");
        need_pooled(x, y, p);
        no_overlap(y, x);
        launch(h, {y}, [=] {
            need_inputs({x});
            need_prior(y, b);
            windows(x.t, y.t, p, x.p, [&](size_t o, size_t, float m) { blend(const_cast<float*>(y.p), o, a, m, b); });
        }, "cudnnPoolingForward");
    });
}

cudnnStatus_t cudnnPoolingBackward(cudnnHandle_t h, const cudnnPoolingDescriptor_t pd, const void* alpha,
                                   const cudnnTensorDescriptor_t yd, const void* yp, const cudnnTensorDescriptor_t dyd,
                                   const void* dyp, const cudnnTensorDescriptor_t xd, const void* xp, const void* beta,
                                   const cudnnTensorDescriptor_t dxd, void* dxp) {
    return api<cudnnStatus_t>("cudnnPoolingBackward", [&] {
        handle(h);
        const auto p = pooling(pd);
        const float a = host_scalar(alpha, BAD, "alpha"), b = host_scalar(beta, BAD, "beta");
        const Arg y = arg(yd, yp, "y"), dy = arg(dyd, dyp, "dy"), x = arg(xd, xp, "x"), dx = arg(dxd, dxp, "dx");
        // BAD_PARAM: "the dimensions n, c, h, w of the yDesc and dyDesc tensors differ", likewise xDesc and dxDesc
        require(y.t == dy.t, BAD, "yDesc " + y.t.str() + " and dyDesc " + dy.t.str() + " differ");
        require(x.t == dx.t, BAD, "xDesc " + x.t.str() + " and dxDesc " + dx.t.str() + " differ");
        need_pooled(x, y, p);
        for (const Arg* in : {&y, &dy, &x}) no_overlap(dx, *in);
        launch(h, {dx}, [=] {
            need_inputs({y, dy, x});
            need_prior(dx, b);
            std::vector<float> grad(dx.t.count(), 0.0f);
            windows(x.t, y.t, p, x.p, [&](size_t o, size_t best, float m) {
                // y is the forward output of x ("y: data pointer ... the output tensor of the forward pooling"):
                // max pooling is exact, so anything else means swapped or stale arguments
                if (y.p[o] != m)
                    refuse(CUDNN_STATUS_BAD_PARAM, "y element " + std::to_string(o) + " = " + std::to_string(y.p[o]) +
                                                       " is not the maximum " + std::to_string(m) +
                                                       " of its window of x: y must be cudnnPoolingForward(x) "
                                                       "(are y and dy swapped?)");
                grad[best] += dy.p[o];
            });
            for (size_t i = 0; i < grad.size(); ++i) blend(const_cast<float*>(dx.p), i, a, grad[i], b);
        }, "cudnnPoolingBackward");
    });
}

// "This routine allows in-place operation; meaning, xData and yData pointers may be equal. However, this
// requires xDesc and yDesc descriptors to be identical" (cudnnActivationForward)
cudnnStatus_t cudnnActivationForward(cudnnHandle_t h, cudnnActivationDescriptor_t ad, const void* alpha,
                                     const cudnnTensorDescriptor_t xd, const void* xp, const void* beta,
                                     const cudnnTensorDescriptor_t yd, void* yp) {
    return api<cudnnStatus_t>("cudnnActivationForward", [&] {
        handle(h);
        activation(ad);
        const float a = host_scalar(alpha, BAD, "alpha"), b = host_scalar(beta, BAD, "beta");
        const Arg x = arg(xd, xp, "x"), y = arg(yd, yp, "y");
        require(x.t == y.t, BAD, "xDesc " + x.t.str() + " and yDesc " + y.t.str() + " differ");
        no_overlap(y, x, "for x and y of cudnnActivationForward");
        launch(h, {y}, [=] {
            need_inputs({x});
            need_prior(y, b);
            float* out = const_cast<float*>(y.p);
            for (size_t i = 0; i < x.t.count(); ++i) blend(out, i, a, x.p[i] > 0.0f ? x.p[i] : 0.0f, b);
        }, "cudnnActivationForward");
    });
}

// In place for dy and dx with identical descriptors (cudnnActivationBackward); ReLU passes dy where x > 0.
cudnnStatus_t cudnnActivationBackward(cudnnHandle_t h, cudnnActivationDescriptor_t ad, const void* alpha,
                                      const cudnnTensorDescriptor_t yd, const void* yp,
                                      const cudnnTensorDescriptor_t dyd, const void* dyp,
                                      const cudnnTensorDescriptor_t xd, const void* xp, const void* beta,
                                      const cudnnTensorDescriptor_t dxd, void* dxp) {
    return api<cudnnStatus_t>("cudnnActivationBackward", [&] {
        handle(h);
        activation(ad);
        const float a = host_scalar(alpha, BAD, "alpha"), b = host_scalar(beta, BAD, "beta");
        const Arg y = arg(yd, yp, "y"), dy = arg(dyd, dyp, "dy"), x = arg(xd, xp, "x"), dx = arg(dxd, dxp, "dx");
        require(y.t == dy.t && dy.t == x.t && x.t == dx.t, BAD, "yDesc, dyDesc, xDesc and dxDesc differ");
        no_overlap(dx, y);
        no_overlap(dx, x);
        no_overlap(dx, dy, "for dy and dx of cudnnActivationBackward");
        launch(h, {dx}, [=] {
            need_inputs({y, dy, x});
            need_prior(dx, b);
            float* out = const_cast<float*>(dx.p);
            for (size_t i = 0; i < x.t.count(); ++i) blend(out, i, a, x.p[i] > 0.0f ? dy.p[i] : 0.0f, b);
        }, "cudnnActivationBackward");
    });
}

cudnnStatus_t cudnnSoftmaxForward(cudnnHandle_t h, cudnnSoftmaxAlgorithm_t algo, cudnnSoftmaxMode_t mode,
                                  const void* alpha, const cudnnTensorDescriptor_t xd, const void* xp,
                                  const void* beta, const cudnnTensorDescriptor_t yd, void* yp) {
    return api<cudnnStatus_t>("cudnnSoftmaxForward", [&] {
        handle(h);
        const float a = host_scalar(alpha, BAD, "alpha"), b = host_scalar(beta, BAD, "beta");
        require(algo == CUDNN_SOFTMAX_FAST || algo == CUDNN_SOFTMAX_ACCURATE || algo == CUDNN_SOFTMAX_LOG, BAD,
                "algo: invalid enumerant");
        require(mode == CUDNN_SOFTMAX_MODE_INSTANCE || mode == CUDNN_SOFTMAX_MODE_CHANNEL, BAD, "mode: invalid enumerant");
        const Arg x = arg(xd, xp, "x"), y = arg(yd, yp, "y");
        // BAD_PARAM: "the dimensions n, c, h, w of the input tensor and output tensors differ"
        require(x.t == y.t, BAD, "xDesc " + x.t.str() + " and yDesc " + y.t.str() + " differ");
        no_overlap(y, x);
        launch(h, {y}, [=] {
            need_inputs({x});
            need_prior(y, b);
            // INSTANCE: over c, h, w of each image; CHANNEL: over c at each (n, h, w)
            const size_t plane = size_t(x.t.h) * x.t.w;
            const size_t groups = mode == CUDNN_SOFTMAX_MODE_INSTANCE ? size_t(x.t.n) : size_t(x.t.n) * plane;
            const size_t len = mode == CUDNN_SOFTMAX_MODE_INSTANCE ? size_t(x.t.c) * plane : size_t(x.t.c);
            const size_t step = mode == CUDNN_SOFTMAX_MODE_INSTANCE ? 1 : plane;
            for (size_t gi = 0; gi < groups; ++gi) {
                const size_t base = mode == CUDNN_SOFTMAX_MODE_INSTANCE ? gi * len : (gi / plane) * x.t.c * plane + gi % plane;
                double m = -INFINITY, sum = 0;
                for (size_t i = 0; i < len; ++i) m = std::max(m, double(x.p[base + i * step]));
                for (size_t i = 0; i < len; ++i) sum += std::exp(double(x.p[base + i * step]) - m);
                for (size_t i = 0; i < len; ++i) {
                    const double z = double(x.p[base + i * step]) - m;
                    const double r = algo == CUDNN_SOFTMAX_LOG ? z - std::log(sum) : std::exp(z) / sum;
                    blend(const_cast<float*>(y.p), base + i * step, a, float(r), b);
                }
            }
        }, "cudnnSoftmaxForward");
    });
}

// C = alpha * A + beta * C, A broadcast: "each dimension of the bias tensor A must match the corresponding
// dimension of the destination tensor C or must be equal to 1" (cudnnAddTensor)
cudnnStatus_t cudnnAddTensor(cudnnHandle_t h, const void* alpha, const cudnnTensorDescriptor_t ad, const void* ap,
                             const void* beta, const cudnnTensorDescriptor_t cd, void* cp) {
    return api<cudnnStatus_t>("cudnnAddTensor", [&] {
        handle(h);
        const float al = host_scalar(alpha, BAD, "alpha"), be = host_scalar(beta, BAD, "beta");
        const Arg A = arg(ad, ap, "A"), C = arg(cd, cp, "C");
        const int a_dims[] = {A.t.n, A.t.c, A.t.h, A.t.w}, c_dims[] = {C.t.n, C.t.c, C.t.h, C.t.w};
        for (int d = 0; d < 4; ++d)
            require(a_dims[d] == c_dims[d] || a_dims[d] == 1, BAD,
                    "aDesc " + A.t.str() + ": each dimension must match cDesc " + C.t.str() + " or be 1");
        no_overlap(C, A);
        launch(h, {C}, [=] {
            need_inputs({A});
            need_prior(C, be);
            float* out = const_cast<float*>(C.p);
            size_t i = 0;
            for (int n = 0; n < C.t.n; ++n)
                for (int c = 0; c < C.t.c; ++c)
                    for (int y = 0; y < C.t.h; ++y)
                        for (int x = 0; x < C.t.w; ++x, ++i) {
                            const size_t j = ((size_t(A.t.n == 1 ? 0 : n) * A.t.c + (A.t.c == 1 ? 0 : c)) * A.t.h +
                                              (A.t.h == 1 ? 0 : y)) * A.t.w + (A.t.w == 1 ? 0 : x);
                            blend(out, i, al, A.p[j], be);
                        }
        }, "cudnnAddTensor");
    });
}
