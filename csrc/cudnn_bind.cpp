// (being written) GPU path bindings.
#include <pybind11/pybind11.h>
#include <cuda_runtime.h>
#include <cudnn.h>
namespace py = pybind11;
void bind_cudnn(py::module_& m) {
    m.attr("CUDNN_VERSION") = CUDNN_VERSION;
    m.def("cudnn_version", [] { return cudnnGetVersion(); });
    m.def("cuda_device_count", [] { int n = 0; return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0; });
}
