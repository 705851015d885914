// cblas backend bindings: every array is checked (arrays.h) before the C++ CpuNet (cblas_net.h)
// touches it; the GIL is released while it computes. Misuse raises ValueError, an allocation
// failure MemoryError (from whichever thread it happened on).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "arrays.h"
#include "cblas_net.h"

namespace py = pybind11;
using lenet::CpuNet;
using lenet::model::NUM_TENSORS;

namespace {

constexpr int MAX_REPEATS = 1000000;

std::unique_ptr<CpuNet> make_net(const py::object& params, int threads, const std::string& isa,
                                 const std::string& split, bool balance) {
    const auto arrays = lenet::checked_params(params);
    const float* host[NUM_TENSORS];
    for (int t = 0; t < NUM_TENSORS; ++t) host[t] = arrays[t].data();
    try {
        return std::make_unique<CpuNet>(host, threads, isa, split, balance);
    } catch (const std::invalid_argument& e) {
        throw py::value_error(e.what());
    }
}

py::array_t<float> images_arg(const py::object& images, bool finite = true) {
    static const std::vector<py::ssize_t> shape{-1, 1, lenet::model::S0, lenet::model::S0};   // built once
    return lenet::checked_f32(images, "images", shape, finite);
}

py::array_t<float> predict(CpuNet& net, const py::object& images) {
    auto x = images_arg(images, false);   // NaN and infinity: CpuNet::predict
    const int n = int(x.shape(0));
    py::array_t<float> logits({py::ssize_t(n), py::ssize_t(lenet::model::OUT)});
    const float* xp = x.data();
    float* out = logits.mutable_data();
    try {
        py::gil_scoped_release nogil;
        net.predict(xp, n, out);
    } catch (const std::invalid_argument& e) {
        throw py::value_error(e.what());
    }
    return logits;
}

}  // namespace

void bind_cblas(py::module_& m) {
    py::class_<CpuNet> cls(m, "CpuNet", "LeNet on the CPU: direct vectorised convolutions, OpenBLAS sgemm, SGD");
    const auto set_cuts = [](CpuNet& net, const std::array<int, 3>& cuts) {
        try {
            net.set_cuts(cuts);
        } catch (const std::invalid_argument& e) {
            throw py::value_error(e.what());
        }
    };
    cls.def(py::init(&make_net), py::arg("params"), py::arg("threads") = 0, py::arg("isa") = "auto",
             py::arg("split") = "auto", py::arg("balance") = true,
             "params: {name: float32 C-contiguous array} with the eight canonical tensors; threads: compute "
             "threads, the calling one included (0: OpenBLAS's default count; 1: the calling thread only); "
             "isa: the forward kernels' instruction set, auto, avx512, avx2 or generic; split: a single image "
             "cut over two threads by channels, rows (avx512 only) or auto (whichever its recent images took "
             "less time in); balance: the cuts move to whichever thread runs faster (False: they stay where set)")
        .def_property_readonly("threads", &CpuNet::threads)
        .def_property_readonly("isa", &CpuNet::isa, "the forward kernels in use: avx512, avx2 or generic")
        .def_property("cuts", &CpuNet::cuts, py::cpp_function(set_cuts, py::is_method(cls), py::arg("cuts")),
                      "where a single image's work is cut between its two threads now: the calling thread's "
                      "conv1 and conv2 output channels and fc1 rows (of 20, 50, 500; split by rows only fc1's "
                      "applies); each a whole number of its kernel's blocks that leaves both threads some")
        .def("predict", &predict, py::arg("images"), "(N, 1, 28, 28) float32 -> (N, 10) float32 logits")
        .def("train_step", [](CpuNet& net, const py::object& images, const py::object& labels, double lr) {
                 return lenet::train_step(net, images_arg(images), labels, lr);
             }, py::arg("images"), py::arg("labels"), py::arg("lr"),
             "one SGD step on the mean softmax cross-entropy; labels int32 (N,) in [0, 10); returns the loss")
        .def("parameters", [](CpuNet& net) {
                 py::dict out;
                 float* ptr[NUM_TENSORS];
                 std::vector<py::array_t<float>> arrays;
                 for (int t = 0; t < NUM_TENSORS; ++t) {
                     arrays.emplace_back(lenet::param_shape(t));
                     ptr[t] = arrays.back().mutable_data();
                 }
                 {
                     py::gil_scoped_release nogil;
                     net.parameters(ptr);
                 }
                 for (int t = 0; t < NUM_TENSORS; ++t) out[lenet::model::NAMES[t]] = arrays[t];
                 return out;
             }, "{name: float32 array}, canonical layouts (copies)")
        .def("layer_times", [](CpuNet& net, const py::object& images, int repeats) {
                 auto x = images_arg(images);
                 if (x.shape(0) != 1)
                     throw py::value_error("images: layer_times takes one image, got " + std::to_string(x.shape(0)));
                 if (repeats < 1 || repeats > MAX_REPEATS)
                     throw py::value_error("repeats: expected 1 to " + std::to_string(MAX_REPEATS) + ", got " +
                                           std::to_string(repeats));
                 std::vector<std::pair<std::string, std::vector<double>>> times;
                 std::vector<double> starts;
                 std::vector<bool> by_rows;
                 {
                     py::gil_scoped_release nogil;
                     times = net.layer_times(x.data(), repeats, starts, by_rows);
                 }
                 py::dict out;
                 for (const auto& [name, samples] : times) out[py::str(name)] = samples;
                 return py::make_tuple(out, starts, by_rows);
             }, py::arg("images"), py::arg("repeats"),
             "(1, 1, 28, 28) float32, repeats -> ({group: [µs per repeat]}, [µs], [bool]): the wall time of "
             "each fused group of layers of a single-image forward, in forward order; for each forward whose "
             "second half a helper thread took, how long after the forward began it started (none with one "
             "thread); and for each forward whether it was split by rows");
    // lenet's CblasNet.predict: no Python frame on the way (0.2 µs a call, csrc/NOTES.md v27).
    m.def("predictor", [](const py::object& net, const py::object& bad_images) {
              CpuNet& cpu = net.cast<CpuNet&>();
              return py::cpp_function([net, &cpu, bad_images](const py::object& images) {
                  try {
                      return predict(cpu, images);
                  } catch (const py::value_error& e) {
                      bad_images(images, e.what());   // raises the caller's error for these images
                      throw;
                  }
              }, py::arg("images"));
          }, py::arg("net"), py::arg("bad_images"),
          "net.predict as a function (it keeps net alive) that, where net.predict raises ValueError for "
          "the images, calls bad_images(images, message) to raise the caller's error instead");
    m.def("blas_config", &lenet::blas_config, "the OpenBLAS build in use");
}
