// The stand-in cuDNN's handle, descriptors and the checks the calls share (cudnn_types.h).
// Rules from the cuDNN 9 API reference (legacy API); each descriptor is created and destroyed once.
#include <cstring>

#include "cudnn_types.h"

namespace lenet::emu {

std::string cudnnTensorStruct_str(const cudnnTensorStruct& t) {
    return "(" + std::to_string(t.n) + ", " + std::to_string(t.c) + ", " + std::to_string(t.h) + ", " +
           std::to_string(t.w) + ")";
}

cudnnContext& handle(cudnnHandle_t h) {
    need_alive(h, "cudnnHandle", CUDNN_STATUS_BAD_PARAM, "handle");
    return *h;
}

template <class D>
D initialised(D* d, const char* kind, const std::string& name) {
    need_alive(d, kind, BAD, name);
    require(d->set, BAD, name + " was created but never set");
    return *d;
}

cudnnTensorStruct tensor(cudnnTensorDescriptor_t d, const char* name) {
    return initialised(d, "tensor descriptor", std::string(name) + "Desc");
}
cudnnFilterStruct filter(cudnnFilterDescriptor_t d, const char* name) {
    return initialised(d, "filter descriptor", std::string(name) + "Desc");
}
cudnnConvolutionStruct convolution(cudnnConvolutionDescriptor_t d) {
    return initialised(d, "convolution descriptor", "convDesc");
}
cudnnPoolingStruct pooling(cudnnPoolingDescriptor_t d) { return initialised(d, "pooling descriptor", "poolingDesc"); }
cudnnActivationStruct activation(cudnnActivationDescriptor_t d) {
    return initialised(d, "activation descriptor", "activationDesc");
}

Arg arg(cudnnTensorDescriptor_t d, const void* p, const char* name) {
    Arg a{tensor(d, name), static_cast<const float*>(p), name};
    need_device(p, a.bytes(), BAD, std::string(name) + " " + a.t.str());
    return a;
}

void no_overlap(const Arg& out, const Arg& in, const char* allowed_where) {
    if (!overlap(out.p, out.bytes(), in.p, in.bytes())) return;
    if (allowed_where && out.p == in.p && out.t == in.t) return;
    refuse(BAD, std::string(out.name) + " overlaps " + in.name + ": in-place operation is documented only " +
                    (allowed_where ? allowed_where : "for other calls (activation forward/backward)") +
                    ", with identical descriptors");
}

void need_inputs(std::initializer_list<Arg> inputs) {
    for (const Arg& a : inputs) {
        need_device(a.p, a.bytes(), cudaErrorIllegalAddress, std::string(a.name) + " (at execution)");
        need_written(a.p, a.t.count(), cudaErrorLaunchFailure, a.name);
    }
}

void need_prior(const Arg& out, float beta) {
    need_device(out.p, out.bytes(), cudaErrorIllegalAddress, std::string(out.name) + " (at execution)");
    if (beta != 0.0f)
        need_written(out.p, out.t.count(), cudaErrorLaunchFailure,
                     std::string(out.name) + " (read because beta != 0: y = alpha*result + beta*y)");
}

void need_conv_shapes(const cudnnTensorStruct& x, const cudnnFilterStruct& w, const cudnnConvolutionStruct& conv,
                      const cudnnTensorStruct& y, const char* x_name, const char* y_name) {
    // BAD_PARAM: "xDesc and wDesc have a non-matching number of input feature maps per image"
    require(x.c == w.c, BAD, std::string(x_name) + "Desc " + x.str() + " has " + std::to_string(x.c) +
                                 " channels but wDesc has " + std::to_string(w.c) + " input feature maps");
    const int oh = 1 + (x.h + 2 * conv.pad_h - ((w.h - 1) * conv.dil_h + 1)) / conv.u;
    const int ow = 1 + (x.w + 2 * conv.pad_w - ((w.w - 1) * conv.dil_w + 1)) / conv.v;
    // "for some spatial dimension, wDesc has a spatial size that is larger than the input spatial size"
    require(oh >= 1 && ow >= 1, BAD, "the filter is larger than the padded input");
    const cudnnTensorStruct want{true, x.n, w.k, oh, ow};
    require(y == want, BAD, std::string(y_name) + "Desc " + y.str() + " is not the convolution output " + want.str() +
                                " of " + x_name + " " + x.str() + " (cudnnGetConvolution2dForwardOutputDim)");
}

void launch(cudnnHandle_t h, std::initializer_list<Arg> outputs, Work work, const char* call) {
    enqueue(handle(h).stream, [written = std::vector<Arg>(outputs), work = std::move(work)] {
        work();
        for (const Arg& out : written) mark_written(out.p, out.bytes());   // a kernel may read them next
    }, call);
}

}  // namespace lenet::emu

std::string cudnnTensorStruct::str() const { return lenet::emu::cudnnTensorStruct_str(*this); }

using namespace lenet::emu;

size_t cudnnGetVersion() { return CUDNN_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t s) {
    switch (s) {
        case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
        case CUDNN_STATUS_BAD_PARAM: return describe(s, "CUDNN_STATUS_BAD_PARAM");
        case CUDNN_STATUS_NOT_SUPPORTED: return describe(s, "CUDNN_STATUS_NOT_SUPPORTED");
        case CUDNN_STATUS_EXECUTION_FAILED: return describe(s, "CUDNN_STATUS_EXECUTION_FAILED");
        default: return describe(s, "CUDNN_STATUS_(other)");
    }
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* h) { return create_object<cudnnStatus_t>(h, "cudnnHandle", "cudnnCreate", BAD); }
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) { return destroy_object<cudnnStatus_t>(h, "cudnnHandle", "cudnnDestroy", BAD); }

cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
    return api<cudnnStatus_t>("cudnnSetStream", [&] {
        cudnnContext& c = handle(h);
        need_stream(s, BAD);
        c.stream = s;
    });
}

// Create/Destroy for each descriptor kind.
#define LENET_DESCRIPTOR(Name, Type, kind)                                                                    \
    cudnnStatus_t cudnnCreate##Name(Type* d) { return create_object<cudnnStatus_t>(d, kind, "cudnnCreate" #Name, BAD); } \
    cudnnStatus_t cudnnDestroy##Name(Type d) { return destroy_object<cudnnStatus_t>(d, kind, "cudnnDestroy" #Name, BAD); }
LENET_DESCRIPTOR(TensorDescriptor, cudnnTensorDescriptor_t, "tensor descriptor")
LENET_DESCRIPTOR(FilterDescriptor, cudnnFilterDescriptor_t, "filter descriptor")
LENET_DESCRIPTOR(ConvolutionDescriptor, cudnnConvolutionDescriptor_t, "convolution descriptor")
LENET_DESCRIPTOR(PoolingDescriptor, cudnnPoolingDescriptor_t, "pooling descriptor")
LENET_DESCRIPTOR(ActivationDescriptor, cudnnActivationDescriptor_t, "activation descriptor")
#undef LENET_DESCRIPTOR

// Dimensions: "BAD_PARAM: at least one of the parameters n, c, h, w was negative"; the stand-in refuses
// zero too, and supports NCHW float only (NOT_SUPPORTED otherwise).
static void dims(std::initializer_list<int> ds, const char* names) {
    for (int d : ds) require(d >= 0, BAD, std::string(names) + ": a dimension is negative");
    for (int d : ds) require(d > 0, UNSUPPORTED, std::string(names) + ": a zero dimension (not supported by the stand-in)");
}

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d, cudnnTensorFormat_t format, cudnnDataType_t type,
                                         int n, int c, int h, int w) {
    return api<cudnnStatus_t>("cudnnSetTensor4dDescriptor", [&] {
        need_alive(d, "tensor descriptor", BAD, "tensorDesc");
        dims({n, c, h, w}, "n, c, h, w");
        require(format == CUDNN_TENSOR_NCHW && type == CUDNN_DATA_FLOAT, UNSUPPORTED,
                "the stand-in implements CUDNN_TENSOR_NCHW with CUDNN_DATA_FLOAT only");
        // NOT_SUPPORTED: "the total size of the tensor descriptor exceeds the maximum limit of 2 Giga-elements"
        require(size_t(n) * c * h * w < (size_t(1) << 31), UNSUPPORTED, "more than 2 Giga-elements");
        *d = cudnnTensorStruct{true, n, c, h, w};
    });
}

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d, cudnnDataType_t type, cudnnTensorFormat_t format,
                                         int k, int c, int h, int w) {
    return api<cudnnStatus_t>("cudnnSetFilter4dDescriptor", [&] {
        need_alive(d, "filter descriptor", BAD, "filterDesc");
        dims({k, c, h, w}, "k, c, h, w");   // "BAD_PARAM: at least one of the parameters k, c, h, w is negative"
        require(format == CUDNN_TENSOR_NCHW && type == CUDNN_DATA_FLOAT, UNSUPPORTED,
                "the stand-in implements CUDNN_TENSOR_NCHW (KCRS) with CUDNN_DATA_FLOAT only");
        *d = cudnnFilterStruct{true, k, c, h, w};
    });
}

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h, int pad_w, int u, int v,
                                              int dil_h, int dil_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t type) {
    return api<cudnnStatus_t>("cudnnSetConvolution2dDescriptor", [&] {
        need_alive(d, "convolution descriptor", BAD, "convDesc");
        // BAD_PARAM: "pad_h, pad_w is strictly negative", "u, v is negative or zero", "dilation_h, dilation_w is
        // negative or zero", "mode has an invalid enumerant value"
        require(pad_h >= 0 && pad_w >= 0, BAD, "pad_h, pad_w: strictly negative");
        require(u > 0 && v > 0, BAD, "u, v: negative or zero");
        require(dil_h > 0 && dil_w > 0, BAD, "dilation_h, dilation_w: negative or zero");
        require(mode == CUDNN_CONVOLUTION || mode == CUDNN_CROSS_CORRELATION, BAD, "mode: invalid enumerant");
        require(type == CUDNN_DATA_FLOAT, UNSUPPORTED, "the stand-in implements CUDNN_DATA_FLOAT compute only");
        const cudnnMathType_t math = d->math;   // kept: cudnnSetConvolutionMathType may come first
        *d = cudnnConvolutionStruct{true, pad_h, pad_w, u, v, dil_h, dil_w, mode, math};
    });
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d, cudnnMathType_t math) {
    return api<cudnnStatus_t>("cudnnSetConvolutionMathType", [&] {
        need_alive(d, "convolution descriptor", BAD, "convDesc");
        require(math == CUDNN_DEFAULT_MATH || math == CUDNN_TENSOR_OP_MATH ||
                    math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION || math == CUDNN_FMA_MATH,
                BAD, "mathType: invalid enumerant");
        d->math = math;
    });
}

cudnnStatus_t cudnnSetPooling2dDescriptor(cudnnPoolingDescriptor_t d, cudnnPoolingMode_t mode, cudnnNanPropagation_t nan,
                                          int win_h, int win_w, int pad_h, int pad_w, int stride_h, int stride_w) {
    return api<cudnnStatus_t>("cudnnSetPooling2dDescriptor", [&] {
        need_alive(d, "pooling descriptor", BAD, "poolingDesc");
        // BAD_PARAM: "windowHeight, windowWidth, verticalStride, horizontalStride is negative or mode or
        // maxpoolingNanOpt has an invalid enumerant value"
        require(win_h > 0 && win_w > 0 && stride_h > 0 && stride_w > 0 && pad_h >= 0 && pad_w >= 0, BAD,
                "window, stride: must be positive; padding: not negative");
        require(nan == CUDNN_NOT_PROPAGATE_NAN || nan == CUDNN_PROPAGATE_NAN, BAD, "maxpoolingNanOpt: invalid enumerant");
        require(mode == CUDNN_POOLING_MAX || mode == CUDNN_POOLING_MAX_DETERMINISTIC, UNSUPPORTED,
                "the stand-in implements max pooling only");
        *d = cudnnPoolingStruct{true, mode, win_h, win_w, pad_h, pad_w, stride_h, stride_w};
    });
}

cudnnStatus_t cudnnSetActivationDescriptor(cudnnActivationDescriptor_t d, cudnnActivationMode_t mode,
                                           cudnnNanPropagation_t nan, double coef) {
    return api<cudnnStatus_t>("cudnnSetActivationDescriptor", [&] {
        need_alive(d, "activation descriptor", BAD, "activationDesc");
        // BAD_PARAM: "mode or reluNanOpt has an invalid enumerant value"
        require(nan == CUDNN_NOT_PROPAGATE_NAN || nan == CUDNN_PROPAGATE_NAN, BAD, "reluNanOpt: invalid enumerant");
        require(mode == CUDNN_ACTIVATION_RELU, UNSUPPORTED, "the stand-in implements CUDNN_ACTIVATION_RELU only");
        (void)coef;   // unused by ReLU
        *d = cudnnActivationStruct{true, mode};
    });
}
