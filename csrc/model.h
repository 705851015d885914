// The LeNet architecture for the C++ paths as compile-time constants: python/lenet/model.py is the
// source (the bindings' parameter round-trip and agreement tests check that the two match), and
// the one rule its inputs and parameters obey, finite. Plain C++, no pybind11 or CUDA types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace lenet::model {

constexpr int K = 5, KK = K * K;                   // conv filter 5x5, stride 1, no padding
constexpr int S0 = 28, C1 = 20, S1 = 24, Q1 = 12;  // 1x28x28 -conv1-> 20x24x24 -pool-> 20x12x12
constexpr int C2 = 50, S2 = 8, Q2 = 4;             //          -conv2-> 50x8x8   -pool-> 50x4x4
constexpr int IMG = S0 * S0, P1 = S1 * S1, P2 = S2 * S2, POOL1 = C1 * Q1 * Q1;
constexpr int FLAT = C2 * Q2 * Q2, HID = 500, OUT = 10;   // fc1 800 -> 500, fc2 500 -> 10

// The eight parameter tensors: canonical names, layouts (OIHW, [out, in]) and storage order.
constexpr int NUM_TENSORS = 8;
enum Tensor { W1, B1, W2, B2, F1, FB1, F2, FB2 };
constexpr const char* NAMES[NUM_TENSORS] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                            "fc1.weight",   "fc1.bias",   "fc2.weight",   "fc2.bias"};
constexpr int RANK[NUM_TENSORS] = {4, 1, 4, 1, 2, 1, 2, 1};
constexpr int SHAPES[NUM_TENSORS][4] = {{C1, 1, K, K}, {C1}, {C2, C1, K, K}, {C2},
                                        {HID, FLAT},   {HID}, {OUT, HID},    {OUT}};
constexpr int size(int t) {
    int n = 1;
    for (int d = 0; d < RANK[t]; ++d) n *= SHAPES[t][d];
    return n;
}

// No NaN or infinity in p[0, n): an exponent of all ones, tested on the bits without an early
// exit so that the loop vectorises (a single image's check costs tens of nanoseconds).
inline bool all_finite(const float* p, size_t n) {
    uint32_t bad = 0;
    for (size_t k = 0; k < n; ++k) {
        uint32_t bits;
        std::memcpy(&bits, p + k, sizeof bits);
        bad |= uint32_t((bits & 0x7f800000u) == 0x7f800000u);
    }
    return bad == 0;
}
constexpr const char* NOT_FINITE = "contains NaN or infinity";   // the refusal's words, after "<argument>: "

}  // namespace lenet::model
