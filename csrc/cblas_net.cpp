// (being written) CPU path: im2col + cblas_sgemm.
#include <pybind11/pybind11.h>
namespace py = pybind11;
void bind_cblas(py::module_& m) {}
