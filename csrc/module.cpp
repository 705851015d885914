// lenet._native: the native layer's Python bindings (pybind11). Thin: argument checks, then C++.
#include <pybind11/pybind11.h>

namespace py = pybind11;

void bind_cblas(py::module_& m);   // cblas_bind.cpp
#ifdef LENET_WITH_CUDA
void bind_cudnn(py::module_& m);   // cudnn_bind.cpp
#endif

PYBIND11_MODULE(_native, m) {
    m.doc() = "lenet native layer: cuDNN + cuBLAS (gpu) and im2col + CBLAS (cpu)";
    m.attr("__version__") = LENET_VERSION;   // pyproject.toml's, from the build
    bind_cblas(m);
#ifdef LENET_WITH_CUDA
    m.attr("WITH_CUDA") = true;
    m.attr("CUDA_WHY") = "";
    bind_cudnn(m);
#else
    m.attr("WITH_CUDA") = false;
    m.attr("CUDA_WHY") = LENET_CUDA_WHY;
    m.def("cuda_device_count", [] { return 0; }, "always 0: built without CUDA");
#endif
}
