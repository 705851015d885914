// cudnn backend bindings (g++): every array is checked (arrays.h) before the C++ CudnnNet
// (cudnn_net.cu) touches it; a training step releases the GIL (arrays.h says why). CUDA, cuDNN
// and cuBLAS failures arrive as lenet::CudaError, a std::runtime_error, which pybind11 raises as
// RuntimeError; misuse raises ValueError.
#include <cuda_runtime.h>
#include <cudnn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "arrays.h"
#include "cudnn_net.h"

namespace py = pybind11;
using lenet::CudnnNet;

namespace {

using lenet::model::OUT;

static_assert(lenet::NUM_TENSORS == lenet::model::NUM_TENSORS);

std::unique_ptr<CudnnNet> make_net(const py::object& params, bool graph, bool deterministic) {
    const auto arrays = lenet::checked_params(params);   // model::NAMES order, as CudnnNet expects
    const float* host[lenet::NUM_TENSORS];
    for (int t = 0; t < lenet::NUM_TENSORS; ++t) host[t] = arrays[t].data();
    return std::make_unique<CudnnNet>(host, graph, deterministic);
}

py::array_t<float> images_arg(const py::object& images) {   // (N, 1, 28, 28), 1 <= N <= MAX_BATCH
    auto x = lenet::checked_f32(images, "images", {-1, 1, lenet::model::S0, lenet::model::S0});
    if (x.shape(0) > lenet::MAX_BATCH)
        throw py::value_error("images: at most " + std::to_string(lenet::MAX_BATCH) + " images per call, got " +
                              std::to_string(x.shape(0)));
    return x;
}

int batch_arg(int n) {
    if (n < 1 || n > lenet::MAX_BATCH) throw py::value_error("n: expected a batch size in [1, 65536]");
    return n;
}

}  // namespace

void bind_cudnn(py::module_& m) {
    m.attr("CUDNN_VERSION") = CUDNN_VERSION;
    m.def("cudnn_version", [] { return cudnnGetVersion(); }, "the cuDNN library loaded at run time");
    m.def("cuda_device_count", [] { int n = 0; return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0; });
    m.def("cuda_mem_info", &lenet::cuda_mem_info, "(free, total) bytes of device memory (cudaMemGetInfo)");

    // module_local: the stand-in build of these bindings (_native_emu, tests) loads beside lenet._native
    py::class_<CudnnNet>(m, "CudnnNet", py::module_local(),
                         "LeNet on the GPU: cuDNN + cuBLAS forward, backward and SGD on one stream")
        .def(py::init(&make_net), py::arg("params"), py::arg("graph") = true, py::arg("deterministic") = true,
             "params: {name: float32 C-contiguous array}, canonical; graph: batch-1 inference as a CUDA graph; "
             "deterministic: deterministic cuDNN algorithms for training")
        .def("upload", [](CudnnNet& net, const py::object& images) {
                 auto x = images_arg(images);
                 net.upload(x.data(), int(x.shape(0)));
                 return int(x.shape(0));
             }, py::arg("images"), "stage (N, 1, 28, 28) float32 images for the device; returns N")
        .def("forward", [](CudnnNet& net, int n) { net.forward(batch_arg(n)); return n; }, py::arg("n"),
             "enqueue the forward pass of the staged batch of n images; returns n")
        .def("download", [](CudnnNet& net, int n) {
                 py::array_t<float> logits({py::ssize_t(batch_arg(n)), py::ssize_t(OUT)});
                 net.download(logits.mutable_data(), n);
                 return logits;
             }, py::arg("n"), "wait for the forward pass; (n, 10) float32 logits")
        .def("synchronize", &CudnnNet::synchronize, "wait for all work on the net's stream")
        .def("train_step", [](CudnnNet& net, const py::object& images, const py::object& labels, double lr) {
                 return lenet::train_step(net, images_arg(images), labels, lr);
             }, py::arg("images"), py::arg("labels"), py::arg("lr"),
             "one SGD step on the mean softmax cross-entropy; labels int32 (N,) in [0, 10); returns the loss")
        .def("parameters", [](CudnnNet& net) {
                 std::vector<py::array_t<float>> arrays;
                 float* out[lenet::NUM_TENSORS];
                 for (int t = 0; t < lenet::NUM_TENSORS; ++t) {
                     arrays.emplace_back(lenet::param_shape(t));
                     out[t] = arrays.back().mutable_data();
                 }
                 net.parameters(out);
                 py::dict d;
                 for (int t = 0; t < lenet::NUM_TENSORS; ++t) d[lenet::model::NAMES[t]] = arrays[t];
                 return d;
             }, "{name: float32 array}, canonical layouts (copied from the device)")
        .def("device_times_us", [](CudnnNet& net, const py::object& images, int repeats) {
                 auto x = images_arg(images);
                 if (repeats < 1) throw py::value_error("repeats: expected a positive integer");
                 const lenet::DeviceTimes t = net.device_times_us(x.data(), int(x.shape(0)), repeats);
                 py::dict d;
                 d["forward"] = t.forward;
                 d["kernels"] = t.kernels;
                 return d;
             }, py::arg("images"), py::arg("repeats"),
             "CUDA-event times (us) of `repeats` forward passes, copies excluded: {'forward': as enqueued, "
             "'kernels': replayed as a copy-free CUDA graph}")
        .def("layer_times_us", [](CudnnNet& net, const py::object& images, int repeats) {
                 auto x = images_arg(images);
                 if (x.shape(0) != 1)
                     throw py::value_error("images: layer_times_us takes one image, got " + std::to_string(x.shape(0)));
                 if (repeats < 1) throw py::value_error("repeats: expected a positive integer");
                 py::dict d;
                 for (const auto& [name, samples] : net.layer_times_us(x.data(), repeats)) d[py::str(name)] = samples;
                 return d;
             }, py::arg("images"), py::arg("repeats"),
             "(1, 1, 28, 28) float32, repeats -> {layer: [µs per repeat]}: CUDA-event times of each layer's calls")
        .def("describe", &CudnnNet::describe, "the cuDNN algorithms and workspace of each cached plan (batch size)")
        .def_property_readonly("plans_made", &CudnnNet::plans_made,
                               "plans made so far (cudnnFind* and allocations); a cached batch size is not re-planned")
        .attr("MAX_PLANS") = lenet::MAX_PLANS;
}
