// lenet._native: the native layer's Python bindings (pybind11). Thin: argument checks, then C++.
#include <pybind11/pybind11.h>

#ifdef LENET_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#endif

namespace py = pybind11;

PYBIND11_MODULE(_native, m) {
    m.doc() = "lenet native layer: cuDNN + cuBLAS (gpu) and im2col + CBLAS (cpu)";
    m.attr("__version__") = "0.1.0";
#ifdef LENET_WITH_CUDA
    m.attr("WITH_CUDA") = true;
    m.attr("CUDA_WHY") = "";
    m.attr("CUDNN_VERSION") = CUDNN_VERSION;     // compiled against; cudnn_version() is loaded
    m.attr("CUDART_VERSION") = CUDART_VERSION;
    m.def("cudnn_version", [] { return cudnnGetVersion(); }, "version of the loaded libcudnn");
    m.def("cuda_device_count", [] {
        int count = 0;
        return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
    }, "number of visible CUDA devices (0 when there is no driver or no device)");
#else
    m.attr("WITH_CUDA") = false;
    m.attr("CUDA_WHY") = LENET_CUDA_WHY;
    m.def("cuda_device_count", [] { return 0; }, "always 0: built without CUDA");
#endif
}
