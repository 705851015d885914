// lenet's cudnn backend built against the stand-in CUDA runtime, cuDNN and cuBLAS of tests/cudnn_standin (tests
// only; never installed): the real bindings (cudnn_bind.cpp) and the stand-in's ledger for the tests.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "standin.h"

namespace py = pybind11;

void bind_cudnn(py::module_& m);   // cudnn_bind.cpp

PYBIND11_MODULE(_native_emu, m) {
    m.doc() = "lenet's cudnn backend on the stand-in CUDA runtime, cuDNN and cuBLAS, executed on the CPU";
    m.attr("WITH_CUDA") = true;
    m.attr("CUDA_WHY") = "";
    bind_cudnn(m);
    m.def("live_objects", [] {
        py::dict d;
        for (const auto& c : lenet::emu::live_counts()) d[py::str(c.kind)] = c.live;
        return d;
    }, "live handles, descriptors, streams, events, graphs and allocations, by kind");
    m.def("misuses", &lenet::emu::misuses, "every destroy or free of something not alive (a double destroy)");
}
