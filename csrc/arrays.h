// Argument checks for the pybind11 bindings (cblas_bind.cpp, cudnn_bind.cpp): every array is
// validated before any pointer is used.
#pragma once
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "model.h"

namespace lenet {
namespace py = pybind11;

inline std::string shape_str(const py::array& a) {
    std::string s = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

// `obj` as a float32, C-contiguous array of `shape` (-1: any size >= 1), finite if `finite`;
// otherwise a ValueError naming `name` and what was expected.
inline py::array_t<float> checked_f32(const py::handle& obj, const char* name, const std::vector<py::ssize_t>& shape,
                                      bool finite = true) {
    if (!py::isinstance<py::array>(obj))
        throw py::value_error(std::string(name) + ": expected a numpy.ndarray");
    auto a = py::reinterpret_borrow<py::array>(obj);
    if (!a.dtype().is(py::dtype::of<float>()))
        throw py::value_error(std::string(name) + ": expected dtype float32, got " + std::string(py::str(a.dtype())));
    bool ok = a.ndim() == static_cast<py::ssize_t>(shape.size());
    for (size_t i = 0; ok && i < shape.size(); ++i) ok = shape[i] < 0 ? a.shape(i) >= 1 : a.shape(i) == shape[i];
    if (!ok) {
        std::string want = "(";
        for (size_t i = 0; i < shape.size(); ++i)
            want += (i ? ", " : "") + (shape[i] < 0 ? std::string("N") : std::to_string(shape[i]));
        want += shape.size() == 1 ? ",)" : ")";
        throw py::value_error(std::string(name) + ": expected shape " + want + " with N >= 1, got " + shape_str(a));
    }
    if (!(a.flags() & py::array::c_style))
        throw py::value_error(std::string(name) + ": expected a C-contiguous array");
    auto out = py::reinterpret_borrow<py::array_t<float>>(a);
    if (finite && !model::all_finite(out.data(), size_t(out.size())))
        throw py::value_error(std::string(name) + ": " + model::NOT_FINITE);
    return out;
}

// The canonical shape of parameter tensor t (model.h).
inline std::vector<py::ssize_t> param_shape(int t) {
    return {model::SHAPES[t], model::SHAPES[t] + model::RANK[t]};
}

// `params` as the eight canonical tensors, in model::NAMES order (the arrays keep them alive):
// a dict with exactly those names, each float32, C-contiguous, its exact shape, finite.
inline std::vector<py::array_t<float>> checked_params(const py::object& params) {
    if (!py::isinstance<py::dict>(params)) throw py::value_error("params: expected a dict of float32 arrays");
    auto d = py::reinterpret_borrow<py::dict>(params);
    const char* const* names = model::NAMES;
    for (auto item : d) {
        const std::string key = py::str(item.first);
        if (std::find(names, names + model::NUM_TENSORS, key) == names + model::NUM_TENSORS)
            throw py::value_error("params: unexpected tensor '" + key + "'");
    }
    std::vector<py::array_t<float>> out;
    for (int t = 0; t < model::NUM_TENSORS; ++t) {
        if (!d.contains(names[t])) throw py::value_error(std::string("params: missing tensor '") + names[t] + "'");
        out.push_back(checked_f32(d[names[t]], names[t], param_shape(t)));
    }
    return out;
}

// Integer class labels (n,) in [0, model::OUT) as a C-contiguous int32 array.
inline py::array_t<int32_t> checked_labels(const py::handle& obj, const char* name, py::ssize_t n) {
    if (!py::isinstance<py::array>(obj))
        throw py::value_error(std::string(name) + ": expected a numpy.ndarray");
    auto a = py::reinterpret_borrow<py::array>(obj);
    if (!a.dtype().is(py::dtype::of<int32_t>()))
        throw py::value_error(std::string(name) + ": expected dtype int32, got " + std::string(py::str(a.dtype())));
    if (a.ndim() != 1 || a.shape(0) != n)
        throw py::value_error(std::string(name) + ": expected shape (" + std::to_string(n) + ",), got " + shape_str(a));
    if (!(a.flags() & py::array::c_style))
        throw py::value_error(std::string(name) + ": expected a C-contiguous array");
    auto out = py::reinterpret_borrow<py::array_t<int32_t>>(a);
    for (py::ssize_t k = 0; k < n; ++k)
        if (out.data()[k] < 0 || out.data()[k] >= model::OUT)
            throw py::value_error(std::string(name) + ": labels must lie in [0, " + std::to_string(model::OUT) + ")");
    return out;
}

// The body of both nets' train_step bindings: labels and lr checked against images `x` (already
// checked by the binding's images_arg), then one step of `net` with the GIL released. Released in
// both: a step computes (cblas) or waits for the device (cudnn) for milliseconds and touches no
// Python object, so other Python threads run meanwhile; errors are raised once it is reacquired.
template <class Net>
auto train_step(Net& net, const py::array_t<float>& x, const py::object& labels, double lr) {
    const int n = int(x.shape(0));
    const auto y = checked_labels(labels, "labels", n);
    if (!std::isfinite(lr) || lr <= 0) throw py::value_error("lr: expected a positive finite number");
    py::gil_scoped_release nogil;
    return net.train_step(x.data(), y.data(), n, float(lr));
}

}  // namespace lenet
