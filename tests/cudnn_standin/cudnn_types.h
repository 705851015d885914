// The stand-in cuDNN's handle and descriptors, and the checks every cuDNN call shares (tests/cudnn_standin only).
// The stand-in implements what cudnn_net.cu uses: 4-d NCHW float tensors, packed.
#pragma once
#include <string>

#include "standin.h"

struct cudnnContext {
    cudaStream_t stream = nullptr;
};
struct cudnnTensorStruct {
    bool set = false;
    int n = 0, c = 0, h = 0, w = 0;
    size_t count() const { return size_t(n) * c * h * w; }
    size_t bytes() const { return count() * sizeof(float); }
    bool operator==(const cudnnTensorStruct& o) const { return n == o.n && c == o.c && h == o.h && w == o.w; }
    std::string str() const;   // "(n, c, h, w)"
};
struct cudnnFilterStruct {
    bool set = false;
    int k = 0, c = 0, h = 0, w = 0;
    size_t count() const { return size_t(k) * c * h * w; }
};
struct cudnnConvolutionStruct {
    bool set = false;
    int pad_h = 0, pad_w = 0, u = 1, v = 1, dil_h = 1, dil_w = 1;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    cudnnMathType_t math = CUDNN_DEFAULT_MATH;
};
struct cudnnPoolingStruct {
    bool set = false;
    cudnnPoolingMode_t mode{};
    int win_h = 0, win_w = 0, pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1;
};
struct cudnnActivationStruct {
    bool set = false;
    cudnnActivationMode_t mode{};
};

namespace lenet::emu {

constexpr int BAD = CUDNN_STATUS_BAD_PARAM;
constexpr int UNSUPPORTED = CUDNN_STATUS_NOT_SUPPORTED;
constexpr int FAILED = CUDNN_STATUS_EXECUTION_FAILED;

// A live, initialised handle/descriptor (a copy: queued work keeps the values of the call, as a graph does).
cudnnContext& handle(cudnnHandle_t h);
cudnnTensorStruct tensor(cudnnTensorDescriptor_t d, const char* name);
cudnnFilterStruct filter(cudnnFilterDescriptor_t d, const char* name);
cudnnConvolutionStruct convolution(cudnnConvolutionDescriptor_t d);
cudnnPoolingStruct pooling(cudnnPoolingDescriptor_t d);
cudnnActivationStruct activation(cudnnActivationDescriptor_t d);

// A tensor argument: its descriptor and a device pointer covering it.
struct Arg {
    cudnnTensorStruct t;
    const float* p;
    const char* name;
    size_t bytes() const { return t.bytes(); }
};
Arg arg(cudnnTensorDescriptor_t d, const void* p, const char* name);
// Checks an output that must not overlap any input: cuDNN documents in-place use for a few calls only.
void no_overlap(const Arg& out, const Arg& in, const char* allowed_where = nullptr);
// Output element i = alpha * result + beta * prior; "if beta is zero, the output is not read" (cuDNN
// developer guide, scaling parameters), so with beta = 0 a poisoned output is never touched.
inline void blend(float* y, size_t i, float alpha, float result, float beta) {
    y[i] = beta == 0.0f ? alpha * result : alpha * result + beta * y[i];
}
// At execution: inputs written, and, when beta != 0, the prior output too.
void need_inputs(std::initializer_list<Arg> inputs);
void need_prior(const Arg& out, float beta);
// The conv output size, "outputDim = 1 + (inputDim + 2*pad - (((filterDim-1)*dilation)+1))/convolutionStride"
// (cudnnGetConvolution2dForwardOutputDim); refuses x/w/y that disagree.
void need_conv_shapes(const cudnnTensorStruct& x, const cudnnFilterStruct& w, const cudnnConvolutionStruct& conv,
                      const cudnnTensorStruct& y, const char* x_name, const char* y_name);
// Enqueues `work` on the handle's stream; when it has run, its outputs count as written (memory.cpp).
void launch(cudnnHandle_t h, std::initializer_list<Arg> outputs, Work work, const char* call);

}  // namespace lenet::emu
