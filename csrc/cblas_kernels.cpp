// cblas backend: the vector kernels (cblas_kernels.h), what each version bought in csrc/NOTES.md.
// Convolutions: each vector holds W output pixels (consecutive in a row-stride-28 plane for conv1,
// or with AVX-512 16 columns of a row or 8 of two rows; for conv2 a row or half of one, or with
// AVX-512 two rows four apart), a block of output channels' accumulators stays in registers, each
// input vector is loaded once for the whole block (for conv2 once for all five tap rows), times
// one broadcast weight per channel; then max-pooled, bias added after the max (it commutes with it).
// Dense layers: a row-dot kernel, four rows sharing each load of the input.
// Compiled three times (AVX-512 W = 16, AVX2+FMA W = 8, generic x86-64 W = 4) from templates on W.
#include "cblas_kernels.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace lenet::cblas {
namespace {

template <int W>   // W floats: one zmm (16), ymm (8) or xmm (4) register per target
struct Vec {
    typedef float type __attribute__((vector_size(4 * W)));
    typedef int32_t ints __attribute__((vector_size(4 * W)));   // lane masks and indices
    typedef uint8_t bytes __attribute__((vector_size(W)));
};
#define ALWAYS_INLINE inline __attribute__((always_inline))

template <int W>
ALWAYS_INLINE typename Vec<W>::type load(const float* p) {
    typename Vec<W>::type v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
// 16 floats: 8 of row r and 8 of row r + D of a 12-wide pool1 plane (one shuffle joins two loads).
template <int D>
ALWAYS_INLINE Vec<16>::type rows_apart(const float* r) {
    const auto a = load<8>(r), b = load<8>(r + D * Q1);
    return __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
}
template <int W>
ALWAYS_INLINE float hsum(typename Vec<W>::type v) {
    float s = 0;
    for (int l = 0; l < W; ++l) s += v[l];
    return s;
}
ALWAYS_INLINE float max2(float a, float b) { return a < b ? b : a; }   // by value: vectorises (maxps)
// p moved up to the next cache line (64 bytes), for scratch with 16 floats of slack
ALWAYS_INLINE float* on_cache_line(float* p) { return p + (-reinterpret_cast<uintptr_t>(p) / 4 & 15); }
// The first N lanes of v to p, straight from the register (a memcpy of part of a vector went
// through a copy on the stack, and its reload waited on that store).
template <int N, class T, class V>
ALWAYS_INLINE void store_first(T* p, V v) {
    constexpr int L = sizeof v / sizeof v[0];
    static_assert(N == L || (N == 12 && L == 16) || (N == 4 && L == 8), "the lane counts used here");
    if constexpr (N == L) {
        std::memcpy(p, &v, sizeof v);
    } else if constexpr (N == 12) {
        const auto lo = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7);
        const auto hi = __builtin_shufflevector(v, v, 8, 9, 10, 11);
        std::memcpy(p, &lo, sizeof lo);
        std::memcpy(p + 8, &hi, sizeof hi);
    } else {
        const auto lo = __builtin_shufflevector(v, v, 0, 1, 2, 3);
        std::memcpy(p, &lo, sizeof lo);
    }
}

// N pooled values from the corners a b / c d of their windows (the first N lanes of W-float
// vectors): y[0..N) = max + bias; arg, unless null: each window's first maximum in row-major order
// (0..3).
template <int N, int W>
ALWAYS_INLINE void pool_corners(typename Vec<W>::type a, typename Vec<W>::type b, typename Vec<W>::type c,
                                typename Vec<W>::type d, float bias, float* y, uint8_t* arg) {
    using V = typename Vec<W>::type;
    using I = typename Vec<W>::ints;
    const V ab = a < b ? b : a, cd = c < d ? d : c, m = ab < cd ? cd : ab;
    store_first<N>(y, m + bias);
    if (!arg) return;
    I k = I{} + 3;
    k = c == m ? I{} + 2 : k;
    k = b == m ? I{} + 1 : k;
    k = a == m ? I{} : k;
    store_first<N>(arg, __builtin_convertvector(k, typename Vec<W>::bytes));
}

// Max-pool 2x2/2 of two 24-column rows held as 3 AVX2 vectors each (a: the upper row, c: the lower)
// plus bias into 12 outputs y (and arg unless null), as pool_corners.
ALWAYS_INLINE void pool_rows24(const Vec<8>::type (&a)[3], const Vec<8>::type (&c)[3], float bias, float* y,
                               uint8_t* arg) {
    pool_corners<8, 8>(__builtin_shufflevector(a[0], a[1], 0, 2, 4, 6, 8, 10, 12, 14),
                       __builtin_shufflevector(a[0], a[1], 1, 3, 5, 7, 9, 11, 13, 15),
                       __builtin_shufflevector(c[0], c[1], 0, 2, 4, 6, 8, 10, 12, 14),
                       __builtin_shufflevector(c[0], c[1], 1, 3, 5, 7, 9, 11, 13, 15), bias, y, arg);
    pool_corners<4, 8>(__builtin_shufflevector(a[2], a[2], 0, 2, 4, 6, 0, 2, 4, 6),
                       __builtin_shufflevector(a[2], a[2], 1, 3, 5, 7, 1, 3, 5, 7),
                       __builtin_shufflevector(c[2], c[2], 0, 2, 4, 6, 0, 2, 4, 6),
                       __builtin_shufflevector(c[2], c[2], 1, 3, 5, 7, 1, 3, 5, 7), bias, y + 8,
                       arg ? arg + 8 : nullptr);
}

// Max-pool 2x2/2 of one plane (S rows of STRIDE floats, the first S columns used) plus bias:
// y (S/2, S/2); arg, unless null: the first maximum of each window in row-major order (0..3).
template <int S, int STRIDE, int W>
ALWAYS_INLINE void pool_plane(const float* x, float bias, float* y, uint8_t* arg) {
    constexpr int Q = S / 2;
    for (int ph = 0; ph < Q; ++ph) {
        const float* r0 = x + 2 * ph * STRIDE;
        const float* r1 = r0 + STRIDE;
        if (!arg) {   // inference: two vectorisable maxima
            float m[S];
            for (int k = 0; k < S; ++k) m[k] = max2(r0[k], r1[k]);
            for (int pw = 0; pw < Q; ++pw) y[ph * Q + pw] = max2(m[2 * pw], m[2 * pw + 1]) + bias;
            continue;
        }
        float a[Q], b[Q], c[Q], d[Q];   // the four corners of each window: branch-free, vectorisable
        for (int pw = 0; pw < Q; ++pw) a[pw] = r0[2 * pw], b[pw] = r0[2 * pw + 1], c[pw] = r1[2 * pw], d[pw] = r1[2 * pw + 1];
        for (int pw = 0; pw < Q; ++pw) {
            const float m = max2(max2(a[pw], b[pw]), max2(c[pw], d[pw]));
            y[ph * Q + pw] = m + bias;
            int k = 3;
            k = c[pw] == m ? 2 : k;
            k = b[pw] == m ? 1 : k;
            k = a[pw] == m ? 0 : k;
            arg[ph * Q + pw] = uint8_t(k);
        }
    }
}

// acc += a * b as one vfmadd231ps, the sum in place: left to itself GCC picked forms that overwrite
// a multiplicand in conv2's loop and copied registers back at its end (csrc/NOTES.md v21), and in
// AVX2's conv1 reloaded each input vector as a memory operand of every FMA (v39).
ALWAYS_INLINE void fma_into(Vec<16>::type& acc, Vec<16>::type a, Vec<16>::type b) {
    asm("vfmadd231ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
}
ALWAYS_INLINE void fma_into(Vec<8>::type& acc, Vec<8>::type a, Vec<8>::type b) {
    asm("vfmadd231ps %2, %1, %0" : "+x"(acc) : "x"(a), "x"(b));
}

// conv1 + pool1 with AVX-512, by pairs of output rows pooled straight from the registers (no conv
// plane): for rows (r, r + 1) and a block of NB channels, 3 accumulators per channel, row r's
// columns 0..15, row r + 1's, and columns 16..23 of both, none on the unused columns 24..27 that
// the row-stride-28 form below computes (csrc/NOTES.md, v17). Those last columns of each pair of
// input rows and tap column are joined into one vector once per call (`rights`), not once per
// channel block: a pass takes one tap column down the five tap rows, each of the six input rows
// loaded once as one tap row's lower row and the next one's upper: 11 loads and 5 NB broadcasts
// for 15 NB FMAs, no shuffle (v37). One tap per pass loaded 20 (v21); GCC's unrolled tap rows cost
// 35 register moves and 10 stack accesses per 75 FMAs (v21, v25). Sums by tap column, then row:
// the last bits can differ from the row-stride-28 form's. Inference pools the rows first, then the
// columns; training takes each window's corners for its first maximum (the same maxima).
template <int NB>
ALWAYS_INLINE void conv1_pool_pairs(const float* w, const float* bias, const float* x, int o0, int o1, int ph0,
                                    int ph1, float* pool, uint8_t* arg) {
    using V = Vec<16>::type;
    const int r0 = 2 * ph0;   // rights[r - r0][j]: columns j + 16 .. j + 23 of input rows r and r + 1
    alignas(64) V rights[2 * Q1 + K - 2][K];
    for (int r = r0; r < 2 * ph1 + K - 2; ++r)
#pragma GCC unroll 5
        for (int j = 0; j < K; ++j) {
            const auto a = load<8>(x + r * S0 + 16 + j), b = load<8>(x + (r + 1) * S0 + 16 + j);
            rights[r - r0][j] = __builtin_shufflevector(a, b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
        }
    for (int o = o0; o < o1; o += NB)
        for (int ph = ph0; ph < ph1; ++ph) {
            V acc[NB][3] = {};
#pragma GCC unroll 1
            for (int j = 0; j < K; ++j) {
                const float* x0 = x + 2 * ph * S0 + j;
                V up = load<16>(x0);
#pragma GCC unroll 5
                for (int i = 0; i < K; ++i) {
                    const V down = load<16>(x0 + (i + 1) * S0);
                    const V right = rights[2 * ph + i - r0][j];
#pragma GCC unroll 8
                    for (int b = 0; b < NB; ++b) {
                        const float wb = w[(o + b) * W1S + i * K + j];
                        acc[b][0] += wb * up;
                        acc[b][1] += wb * down;
                        acc[b][2] += wb * right;
                    }
                    up = down;
                }
            }
#pragma GCC unroll 8
            for (int n = 0; n < NB; ++n) {
                const V &up = acc[n][0], &down = acc[n][1], &right = acc[n][2];
                const int q = (o + n) * Q1 * Q1 + ph * Q1;
                if (arg) {   // each window's corners a b / c d
                    pool_corners<12, 16>(
                        __builtin_shufflevector(up, right, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 0, 0, 0, 0),
                        __builtin_shufflevector(up, right, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 0, 0, 0, 0),
                        __builtin_shufflevector(down, right, 0, 2, 4, 6, 8, 10, 12, 14, 24, 26, 28, 30, 0, 0, 0, 0),
                        __builtin_shufflevector(down, right, 1, 3, 5, 7, 9, 11, 13, 15, 25, 27, 29, 31, 0, 0, 0, 0),
                        bias[o + n], pool + q, arg + q);
                    continue;
                }
                const V rows = up < down ? down : up;   // columns 0..15
                const V swapped = __builtin_shufflevector(right, right, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4,
                                                          5, 6, 7);
                const V rows_right = right < swapped ? swapped : right;   // columns 16..23 in lanes 0..7
                const V even = __builtin_shufflevector(rows, rows_right, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22,
                                                       0, 0, 0, 0);
                const V odd = __builtin_shufflevector(rows, rows_right, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23,
                                                      0, 0, 0, 0);
                store_first<12>(pool + q, (even < odd ? odd : even) + bias[o + n]);
            }
        }
}

// One input row's step of conv1_pool_pairs_256 in registers named by hand: its 3 vectors (x0 x1
// x2) loaded once, and for each channel b (of 2) and output row r it serves (UP: the upper row, by
// tap row t; DOWN: the lower, by t - 1), the weight broadcast into s and 3 FMAs, into acc[b][r][q].
// xt: the row's first input, wt: channel 0's weight at tap row t. GCC's own allocation of these 16
// registers spilled three accumulators and reloaded the inputs as FMA operands (csrc/NOTES.md v39).
#define CONV1_FMA3(W_OFFSET, A) \
    "vbroadcastss " #W_OFFSET "(%[w]), %[s]\n\t" \
    "vfmadd231ps %[x0], %[s], %[" #A "0]\n\tvfmadd231ps %[x1], %[s], %[" #A "1]\n\tvfmadd231ps %[x2], %[s], %[" #A "2]\n\t"
template <bool UP, bool DOWN>
ALWAYS_INLINE void conv1_step_256(const float* xt, const float* wt, Vec<8>::type (&acc)[2][2][3]) {
    Vec<8>::type x0, x1, x2, s;
#define CONV1_OPERANDS                                                                                        \
    : [x0] "=&x"(x0), [x1] "=&x"(x1), [x2] "=&x"(x2), [s] "=&x"(s), [a0] "+x"(acc[0][0][0]),                  \
      [a1] "+x"(acc[0][0][1]), [a2] "+x"(acc[0][0][2]), [b0] "+x"(acc[0][1][0]), [b1] "+x"(acc[0][1][1]),      \
      [b2] "+x"(acc[0][1][2]), [c0] "+x"(acc[1][0][0]), [c1] "+x"(acc[1][0][1]), [c2] "+x"(acc[1][0][2]),      \
      [d0] "+x"(acc[1][1][0]), [d1] "+x"(acc[1][1][1]), [d2] "+x"(acc[1][1][2])                                \
    : [x] "r"(xt), [w] "r"(wt) : "memory"
#define CONV1_LOADS "vmovups (%[x]), %[x0]\n\tvmovups 32(%[x]), %[x1]\n\tvmovups 64(%[x]), %[x2]\n\t"
    static_assert(W1S * 4 == 128 && K * 4 == 20, "the weights' offsets below");
    if constexpr (UP && DOWN)
        asm(CONV1_LOADS CONV1_FMA3(0, a) CONV1_FMA3(-20, b) CONV1_FMA3(128, c) CONV1_FMA3(108, d) CONV1_OPERANDS);
    else if constexpr (UP)
        asm(CONV1_LOADS CONV1_FMA3(0, a) CONV1_FMA3(128, c) CONV1_OPERANDS);
    else
        asm(CONV1_LOADS CONV1_FMA3(-20, b) CONV1_FMA3(108, d) CONV1_OPERANDS);
#undef CONV1_LOADS
#undef CONV1_OPERANDS
}
#undef CONV1_FMA3

// conv1 + pool1 with AVX2, by pairs of output rows pooled straight from the registers, as the
// AVX-512 form above: for rows (r, r + 1) and 2 channels, each row's 24 columns as 3 vectors (12
// accumulators). A pass takes one tap column down the six input rows, each row's 3 vectors loaded
// once and serving both output rows: 18 loads and 20 broadcasts for 60 FMAs. The row-stride-28
// form it replaced also computed the 4 unused columns of each row and wrote and read back a conv
// plane (csrc/NOTES.md v39). Sums by tap column, then row, as AVX-512's.
ALWAYS_INLINE void conv1_pool_pairs_256(const float* w, const float* bias, const float* x, int o0, int o1,
                                        float* pool, uint8_t* arg) {
    using V = Vec<8>::type;
    for (int o = o0; o < o1; o += 2)
        for (int ph = 0; ph < Q1; ++ph) {
            V acc[2][2][3] = {};
#pragma GCC unroll 1
            for (int j = 0; j < K; ++j) {
                const float* x0 = x + 2 * ph * S0 + j;
                const float* w0 = w + o * W1S + j;
                conv1_step_256<true, false>(x0, w0, acc);
#pragma GCC unroll 4
                for (int t = 1; t < K; ++t) conv1_step_256<true, true>(x0 + t * S0, w0 + t * K, acc);
                conv1_step_256<false, true>(x0 + K * S0, w0 + K * K, acc);
            }
#pragma GCC unroll 2
            for (int b = 0; b < 2; ++b) {
                const int q = (o + b) * Q1 * Q1 + ph * Q1;
                pool_rows24(acc[b][0], acc[b][1], bias[o + b], pool + q, arg ? arg + q : nullptr);
            }
        }
}

// conv1 + pool1 for output channels [o0, o1) ((o1 - o0) % NB == 0) of one padded image x (XPAD):
// conv (C1, R1) scratch (generic only), pool (C1, 12, 12), arg (C1, 12, 12) or null. AVX-512 and
// AVX2 pool from their registers; generic: each vector holds W consecutive outputs of a
// row-stride-28 plane, NB channels' accumulators, then pooled plane by plane.
template <int W, int NB>
ALWAYS_INLINE void conv1_pool_t(const float* w, const float* bias, const float* x, int o0, int o1, float* conv,
                                float* pool, uint8_t* arg) {
    if constexpr (W == 16) {
        conv1_pool_pairs<NB>(w, bias, x, o0, o1, 0, Q1, pool, arg);
    } else if constexpr (W == 8) {
        conv1_pool_pairs_256(w, bias, x, o0, o1, pool, arg);
    } else {
        using V = typename Vec<W>::type;
        static_assert(R1 % W == 0, "whole passes over a plane");
        for (int o = o0; o < o1; o += NB)
            for (int v = 0; v < R1; v += W) {
                V acc[NB] = {};
                for (int i = 0; i < K; ++i)
#pragma GCC unroll 5
                    for (int j = 0; j < K; ++j) {
                        const V xv = load<W>(x + v + i * S0 + j);
#pragma GCC unroll 32
                        for (int b = 0; b < NB; ++b) acc[b] += w[(o + b) * W1S + i * K + j] * xv;
                    }
#pragma GCC unroll 32
                for (int b = 0; b < NB; ++b) std::memcpy(conv + (o + b) * R1 + v, &acc[b], sizeof acc[b]);
            }
        for (int o = o0; o < o1; ++o)
            pool_plane<S1, S0, W>(conv + o * R1, bias[o], pool + o * Q1 * Q1, arg ? arg + o * Q1 * Q1 : nullptr);
    }
}

// Rows r and r + D of a pool1 plane from r as one vector: joined and kept at p if FIRST, else loaded
// from p (a lambda here made GCC keep conv2's sums on the stack).
template <bool FIRST, int D = 4>
ALWAYS_INLINE Vec<16>::type row_pair(const float* r, float* p) {
    if constexpr (FIRST) {
        const auto v = rows_apart<D>(r);
        std::memcpy(p, &v, sizeof v);
        return v;
    } else {
        return load<16>(p);
    }
}

// conv2's sums with AVX-512 for output channels o..o+NB of pool1 x from its row 0: acc[b][v] holds
// output rows v and v + NV of channel o + b (NV = 4: rows 0..7; NV = 2: rows 0..3). For input
// channel c and tap column j, the NV + 4 vectors of input rows (t, t + NV) serve all five tap rows i
// (vector v + i for output vector v), so NV + 4 loads feed NB x NV x 5 FMAs and each weight's
// broadcast feeds NV (one broadcast load per FMA left Intel's two load ports the bottleneck:
// csrc/NOTES.md, v11 and v12); the block FIRST in a call joins them and keeps them in pairs
// (C1, K, NV + 4 vectors of 16), the later blocks load them whole: no shuffle, which Intel issues on
// an FMA port (v21).
template <int NB, int NV, bool FIRST>
ALWAYS_INLINE void conv2_sums_512(const float* w, const float* x, int o, float* pairs, Vec<16>::type (&acc)[NB][NV]) {
    using V = Vec<16>::type;
    for (int c = 0; c < C1; ++c)
        for (int j = 0; j < K; ++j) {
            const float* xc = x + c * Q1 * Q1 + j;
            float* pc = pairs + (c * K + j) * (NV + 4) * 16;
            const float* wk = w + o * W2S + c * KK + j;
            asm("" : "+r"(wk));   // one pointer, the weights at fixed displacements
            V xv[NV + 4];
#pragma GCC unroll 3
            for (int t = 0; t < NV - 1; ++t) xv[t] = row_pair<FIRST, NV>(xc + t * Q1, pc + t * 16);
#pragma GCC unroll 5
            for (int i = 0; i < K; ++i) {
                // loaded where first used: fewer live registers
                xv[i + NV - 1] = row_pair<FIRST, NV>(xc + (i + NV - 1) * Q1, pc + (i + NV - 1) * 16);
#pragma GCC unroll 16
                for (int b = 0; b < NB; ++b) {
                    const V wb = wk[b * W2S + i * K] - V{};
#pragma GCC unroll 4
                    for (int v = 0; v < NV; ++v) fma_into(acc[b][v], wb, xv[v + i]);
                }
            }
        }
}

// conv2 + pool2 with AVX-512 for output channels o..o+NB of pool1 x, pooled from the registers into
// flat (and arg unless null) as pool_plane would, in the same order (no planes written and read
// back: 25 cycles a channel by the port model, v22); the sums' vectors hold rows four apart.
template <int NB, bool FIRST>
ALWAYS_INLINE void conv2_block_512(const float* w, const float* bias, const float* x, int o, float* pairs, float* flat,
                                   uint8_t* arg) {
    using V = Vec<16>::type;
    V acc[NB][4] = {};
    conv2_sums_512<NB, 4, FIRST>(w, x, o, pairs, acc);
    // acc[b][v]: rows v | v + 4; a window's top rows are 0 2 4 6, so the 16 windows in (h, w) order
    // take their left (LEFT) or right (LEFT + 1) columns from rows 0 | 4 and 2 | 6, or 1 | 5 and 3 | 7.
#define LEFT 0, 2, 4, 6, 16, 18, 20, 22, 8, 10, 12, 14, 24, 26, 28, 30
#define RIGHT 1, 3, 5, 7, 17, 19, 21, 23, 9, 11, 13, 15, 25, 27, 29, 31
#pragma GCC unroll 8
    for (int b = 0; b < NB; ++b) {
        const V* r = acc[b];
        float* y = flat + (o + b) * Q2 * Q2;
        if (arg) {   // corners first, as pool_plane's argmax
            pool_corners<16, 16>(__builtin_shufflevector(r[0], r[2], LEFT), __builtin_shufflevector(r[0], r[2], RIGHT),
                                 __builtin_shufflevector(r[1], r[3], LEFT), __builtin_shufflevector(r[1], r[3], RIGHT),
                                 bias[o + b], y, arg + (o + b) * Q2 * Q2);
        } else {     // rows first, as pool_plane's inference
            // rows 0-1 | 4-5 and 2-3 | 6-7: each window's maximum of its two rows
            const V rows01 = r[0] < r[1] ? r[1] : r[0], rows23 = r[2] < r[3] ? r[3] : r[2];
            const V left = __builtin_shufflevector(rows01, rows23, LEFT);
            const V right = __builtin_shufflevector(rows01, rows23, RIGHT);
            const V m = left < right ? right : left;
            store_first<16>(y, m + bias[o + b]);
        }
    }
#undef LEFT
#undef RIGHT
}

// conv2 + pool2 with AVX-512 for pool2 rows [2h, 2h + 2) of channels o..o+NB (output rows
// 4h..4h+3), from pool1 rows 4h..4h+7 of x only: each vector holds output rows 4h + a and 4h + a + 2
// (a = 0, 1), so six input pairs per input channel and tap column feed both vectors of all five tap
// rows. Sums and pooling in the order of conv2_block_512: the same bits.
// y (C2, 8): each channel's two pooled rows, as they lie in flat.
template <int NB, bool FIRST>
ALWAYS_INLINE void conv2_rows_block_512(const float* w, const float* bias, const float* x, int o, float* pairs,
                                        float* y) {
    using V = Vec<16>::type;
    V acc[NB][2] = {};
    conv2_sums_512<NB, 2, FIRST>(w, x, o, pairs, acc);
#pragma GCC unroll 10
    for (int b = 0; b < NB; ++b) {   // lanes 0-7 rows 4h | 4h + 1, 8-15 rows 4h + 2 | 4h + 3
        const V m = acc[b][0] < acc[b][1] ? acc[b][1] : acc[b][0];
        const V left = __builtin_shufflevector(m, m, 0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14);
        const V right = __builtin_shufflevector(m, m, 1, 3, 5, 7, 9, 11, 13, 15, 1, 3, 5, 7, 9, 11, 13, 15);
        const V pooled = (left < right ? right : left) + bias[o + b];
        const auto lo = __builtin_shufflevector(pooled, pooled, 0, 1, 2, 3, 4, 5, 6, 7);
        std::memcpy(y + (o + b) * 8, &lo, sizeof lo);
    }
}

template <int NB>
ALWAYS_INLINE void conv2_rows_512(const float* w, const float* bias, const float* x, int h, float* conv, float* y) {
    static_assert(C2 % NB == 0 && C1 * K * 6 * 16 + 16 <= CONV2S, "whole channel blocks; the pairs fit the scratch");
    float* pairs = on_cache_line(conv);
    x += 4 * h * Q1;
    conv2_rows_block_512<NB, true>(w, bias, x, 0, pairs, y);
    for (int o = NB; o < C2; o += NB) conv2_rows_block_512<NB, false>(w, bias, x, o, pairs, y);
}

// conv2 + pool2 for output channels [o0, o1) ((o1 - o0) % NB == 0) of pool1 x (C1, 12, 12):
// conv (CONV2S) scratch, flat (C2 * 16) = pool2 in (c, h, w) order, arg (C2 * 16) or null.
// AVX-512: conv2_sums_512 with each vector holding output rows r and r + 4 of a channel, pooled from
// the registers (v22). Otherwise by rows into the planes, then pooled: AVX2 two adjacent output rows
// of one vector each, so 6 input loads and 25 broadcasts feed 50 FMAs (10 accumulators); generic one
// row of two vectors, each broadcast feeding both (v18). The sums keep AVX-512's order (channel, tap
// column, tap row): AVX2's results equal its.
template <int W, int NB>
ALWAYS_INLINE void conv2_pool_t(const float* w, const float* bias, const float* x, int o0, int o1, float* conv,
                                float* flat, uint8_t* arg) {
    using V = typename Vec<W>::type;
    for (int o = o0; o < o1; o += NB) {
        if constexpr (W == 16) {
            float* pairs = on_cache_line(conv);
            if (o == o0) conv2_block_512<NB, true>(w, bias, x, o, pairs, flat, arg);
            else conv2_block_512<NB, false>(w, bias, x, o, pairs, flat, arg);
        } else {
            constexpr int VR = S2 / W, R = VR == 1 ? 2 : 1;   // vectors per output row, rows per block
            static_assert(S2 % W == 0 && S2 % R == 0, "whole rows, whole blocks");
            for (int r0 = 0; r0 < S2; r0 += R) {
                V acc[NB][R][VR] = {};
                for (int c = 0; c < C1; ++c)
                    for (int j = 0; j < K; ++j) {
                        const float* xc = x + (c * Q1 + r0) * Q1 + j;
                        const float* wk = w + o * W2S + c * KK + j;
                        V xv[K + R - 1][VR];
#pragma GCC unroll 2
                        for (int t = 0; t < R - 1; ++t)
#pragma GCC unroll 2
                            for (int q = 0; q < VR; ++q) xv[t][q] = load<W>(xc + t * Q1 + q * W);
#pragma GCC unroll 5
                        for (int i = 0; i < K; ++i) {
#pragma GCC unroll 2
                            for (int q = 0; q < VR; ++q) xv[i + R - 1][q] = load<W>(xc + (i + R - 1) * Q1 + q * W);
#pragma GCC unroll 8
                            for (int b = 0; b < NB; ++b) {
                                const float wb = wk[b * W2S + i * K];
                                V wv;
                                if constexpr (W == 8) asm("vbroadcastss %1, %0" : "=x"(wv) : "m"(wk[b * W2S + i * K]));
#pragma GCC unroll 2
                                for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
                                    for (int q = 0; q < VR; ++q) {
                                        if constexpr (W == 8) fma_into(acc[b][r][q], wv, xv[i + r][q]);
                                        else acc[b][r][q] += wb * xv[i + r][q];
                                    }
                            }
                        }
                    }
#pragma GCC unroll 8
                for (int b = 0; b < NB; ++b)
#pragma GCC unroll 2
                    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
                        for (int q = 0; q < VR; ++q)
                            std::memcpy(conv + (o + b) * P2 + (r0 + r) * S2 + q * W, &acc[b][r][q], sizeof(V));
            }
        }
    }
    if constexpr (W != 16)
        for (int o = o0; o < o1; ++o)
            pool_plane<S2, S2, W>(conv + o * P2, bias[o], flat + o * Q2 * Q2, arg ? arg + o * Q2 * Q2 : nullptr);
}

// y[b, r] = bias[r] + w[r, :] · x[b, :] for NI images and rows [r0, r1) of w (ROWS, IN), then ReLU
// if RELU; x (NI, IN), y (NI, ROWS). Blocks of 4 rows x NI images: each load feeds 4 or NI FMAs.
// down: the blocks from the last rows to the first (the same sums), so that a pass reads first what
// the pass before, going the other way, read last: where fc1's half of the weights overflows L2
// (Zen 3's 512 kB), those lines are still there (csrc/NOTES.md v39).
template <int W, int IN, int ROWS, bool RELU, int NI>
ALWAYS_INLINE void dense_block(const float* w, const float* bias, const float* x, int r0, int r1, float* y,
                               bool down) {
    using V = typename Vec<W>::type;
    constexpr int N = IN / W * W;
    auto finish = [&](int r, int b, V acc) {
        float s = hsum<W>(acc);
        for (int k = N; k < IN; ++k) s += w[size_t(r) * IN + k] * x[b * IN + k];
        s += bias[r];
        y[b * ROWS + r] = RELU ? std::max(s, 0.0f) : s;
    };
    const int blocks = (r1 - r0) / 4, rest = r0 + 4 * blocks;
    auto one_row = [&](int r) {
        V acc[NI] = {};
        for (int k = 0; k < N; k += W) {
            const V wv = load<W>(w + size_t(r) * IN + k);
#pragma GCC unroll 4
            for (int b = 0; b < NI; ++b) acc[b] += wv * load<W>(x + b * IN + k);
        }
        for (int b = 0; b < NI; ++b) finish(r, b, acc[b]);
    };
    if (down)
        for (int r = r1 - 1; r >= rest; --r) one_row(r);
    for (int n = 0; n < blocks; ++n) {
        const int r = r0 + 4 * (down ? blocks - 1 - n : n);
        const float* w0 = w + size_t(r) * IN;
        V acc[4][NI] = {};
        for (int k = 0; k < N; k += W) {
            V xv[NI];
#pragma GCC unroll 4
            for (int b = 0; b < NI; ++b) xv[b] = load<W>(x + b * IN + k);
#pragma GCC unroll 4
            for (int i = 0; i < 4; ++i) {
                const V wv = load<W>(w0 + i * IN + k);
#pragma GCC unroll 4
                for (int b = 0; b < NI; ++b) acc[i][b] += wv * xv[b];
            }
        }
        for (int i = 0; i < 4; ++i)
            for (int b = 0; b < NI; ++b) finish(r + i, b, acc[i][b]);
    }
    if (!down)
        for (int r = rest; r < r1; ++r) one_row(r);
}

// As dense_block for n images, NI at a time (4 x NI accumulators fit the registers).
template <int W, int IN, int ROWS, bool RELU>
ALWAYS_INLINE void dense_t(const float* w, const float* bias, const float* x, int n, int r0, int r1, float* y,
                           bool down = false) {
    constexpr int NI = W == 16 ? 4 : 2;
    int b = 0;
    for (; b + NI <= n; b += NI) dense_block<W, IN, ROWS, RELU, NI>(w, bias, x + b * IN, r0, r1, y + b * ROWS, down);
    for (; b < n; ++b) dense_block<W, IN, ROWS, RELU, 1>(w, bias, x + b * IN, r0, r1, y + b * ROWS, down);
}

// fc1 by halves of its inputs, for one image (AVX-512): w (fc1_halves) holds, for each half h of
// flat (its 8 entries 16 c + 8 h .. of each channel c), blocks of FC1_BLOCK pairs of rows, each
// block by channel, then pair: 16 floats, the pair's first row's 8 weights of that chunk, then the
// second's. So a half's weights are read as one stream, in order (Zen 5 reads L2 as one stream at
// 1.6x the rate of five 3.2 kB apart, csrc/NOTES.md v31). One 16-float vector per pair, times the
// chunk of x twice: each row's 8 lanes sum half h's inputs 8 apart. A row's output: its two halves'
// sums added lane by lane (IEEE addition commutes: either half may come first, the same bits), then
// its 8 lanes as a tree (l + (l ^ 4), then ^ 2, then ^ 1: in vectors, where a scalar chain cost a
// fifth more, v31), plus bias, ReLU. down: the blocks in descending order (the same sums;
// one_image alternates, so that each image first reads the lines the one before read last, still
// in L2, v31).
ALWAYS_INLINE void fc1_pair_out(Vec<16>::type t, const float* bias, int row, float* y) {
    t += __builtin_shufflevector(t, t, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11);
    t += __builtin_shufflevector(t, t, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13);
    t += __builtin_shufflevector(t, t, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14);
    y[row] = std::max(t[0] + bias[row], 0.0f);
    y[row + 1] = std::max(t[8] + bias[row + 1], 0.0f);
}

// HALVES 1: half h only, x its 400 inputs (C2, 8); HALVES 2: both, x flat, two streams.
template <int HALVES>
ALWAYS_INLINE void fc1_halves_t(const float* w, const float* bias, const float* x, int h, int r0, int r1,
                                float* part, float* y, bool join, bool down) {
    using V = Vec<16>::type;
    constexpr int PAIRS = HID / 2, QB = FC1_BLOCK;   // a block's pairs: QB chains of FMAs per half
    static_assert(PAIRS % QB == 0, "whole blocks");
    const int blocks = (r1 - r0) / (2 * QB);
    for (int b = 0; b < blocks; ++b) {
        const int q = r0 / 2 + (down ? blocks - 1 - b : b) * QB;
        const float* wq[HALVES];
        for (int k = 0; k < HALVES; ++k) wq[k] = w + (size_t(HALVES == 1 ? h : k) * PAIRS + q) * C2 * 16;
        V acc[HALVES][QB] = {};
        for (int c = 0; c < C2; ++c) {
            V xv[HALVES];
            if constexpr (HALVES == 1) {
                const auto x8 = load<8>(x + c * 8);
                xv[0] = __builtin_shufflevector(x8, x8, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
            } else {
                const V f = load<16>(x + c * 16);
                xv[0] = __builtin_shufflevector(f, f, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
                xv[1] = __builtin_shufflevector(f, f, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
            }
#pragma GCC unroll 5
            for (int i = 0; i < QB; ++i)
#pragma GCC unroll 2
                for (int k = 0; k < HALVES; ++k) acc[k][i] += load<16>(wq[k] + (size_t(c) * QB + i) * 16) * xv[k];
        }
#pragma GCC unroll 5
        for (int i = 0; i < QB; ++i) {
            const int row = 2 * (q + i);
            if constexpr (HALVES == 2) {
                fc1_pair_out(acc[0][i] + acc[1][i], bias, row, y);
            } else {   // part: null for both halves, so only here
                float* own = part + size_t(row) * 8;   // the pair's two rows, 8 sums each
                if (join)
                    fc1_pair_out(acc[0][i] + load<16>(own), bias, row, y);
                else
                    std::memcpy(own, &acc[0][i], sizeof acc[0][i]);
            }
        }
    }
}

// y[0:16] = the sum over h in [c0, c1) of x[h] * w[h, 0:16] (w (HID, 16): fc2's weights by
// input, Net::make_single_weights): one broadcast and 16 / W FMAs a row, no horizontal sum; rows
// in A chains (row h in chain (h - c0) % A), the chains added in order: the same bits for the same
// [c0, c1) wherever it runs.
template <int W>
ALWAYS_INLINE void fc2_part_t(const float* w, const float* x, int c0, int c1, float* y) {
    using V = typename Vec<W>::type;
    constexpr int N = 16 / W, A = W == 4 ? 2 : 5;   // vectors a row; chains (A * N accumulators)
    V acc[A][N] = {};
    int h = c0;
    for (; h + A <= c1; h += A)
#pragma GCC unroll 5
        for (int a = 0; a < A; ++a)
#pragma GCC unroll 4
            for (int v = 0; v < N; ++v) acc[a][v] += x[h + a] * load<W>(w + (h + a) * 16 + v * W);
    for (int a = 0; h < c1; ++h, ++a)
        for (int v = 0; v < N; ++v) acc[a][v] += x[h] * load<W>(w + h * 16 + v * W);
    for (int v = 0; v < N; ++v) {
        V sum = acc[0][v];
        for (int a = 1; a < A; ++a) sum += acc[a][v];
        std::memcpy(y + v * W, &sum, sizeof sum);
    }
}

// fc1's gradients over its nonzero ReLU gradients only (about half are zero): for rows r in [r0,
// r1) of a sparse matrix (terms k in [begin[r], end[r]), begin null: from 0; idx[r * cap + k],
// val[r * cap + k]), y[r, c0:c1] = (add ? y[r, c0:c1] : 0) + alpha * the sum of its terms' rows of
// src, val times src[idx, c0:c1]. Two rows at a time, NV vectors of each in registers: 2 * NV
// independent FMA chains, one load per FMA.
template <int W>
ALWAYS_INLINE void sparse_rows_t(const float* src, int ld, const int* idx, const float* val, const int* begin,
                                 const int* end, int cap, int r0, int r1, int c0, int c1, float alpha, bool add,
                                 float* y, int ldy) {
    using V = typename Vec<W>::type;
    constexpr int NV = 5;
    static_assert(SPARSE_BLOCK % (NV * W) == 0, "column ranges in whole blocks");
    auto first = [&](int r) { return size_t(r) * cap + (begin ? begin[r] : 0); };
    auto length = [&](int r) { return end[r] - (begin ? begin[r] : 0); };
    for (int c = c0; c < c1; c += NV * W) {
        auto terms = [&](int r, int k0, V* acc) {   // row r's terms from its k0-th on
            const int *i = idx + first(r), n = length(r);
            const float* v = val + first(r);
            for (int k = k0; k < n; ++k) {
                const float* s = src + size_t(i[k]) * ld + c;
#pragma GCC unroll 5
                for (int u = 0; u < NV; ++u) acc[u] += v[k] * load<W>(s + u * W);
            }
        };
        auto put = [&](int r, const V* acc) {
            float* out = y + size_t(r) * ldy + c;
#pragma GCC unroll 5
            for (int v = 0; v < NV; ++v) {
                const V sum = (add ? load<W>(out + v * W) : V{}) + alpha * acc[v];
                std::memcpy(out + v * W, &sum, sizeof sum);
            }
        };
        int r = r0;
        for (; r + 2 <= r1; r += 2) {
            V a0[NV] = {}, a1[NV] = {};
            const int *i0 = idx + first(r), *i1 = idx + first(r + 1);
            const float *v0 = val + first(r), *v1 = val + first(r + 1);
            const int both = std::min(length(r), length(r + 1));
            for (int k = 0; k < both; ++k) {
                const float *s0 = src + size_t(i0[k]) * ld + c, *s1 = src + size_t(i1[k]) * ld + c;
#pragma GCC unroll 5
                for (int v = 0; v < NV; ++v) {
                    a0[v] += v0[k] * load<W>(s0 + v * W);
                    a1[v] += v1[k] * load<W>(s1 + v * W);
                }
            }
            terms(r, both, a0);
            terms(r + 1, both, a1);
            put(r, a0);
            put(r + 1, a1);
        }
        if (r < r1) {
            V a0[NV] = {};
            terms(r, 0, a0);
            put(r, a0);
        }
    }
}

// --- backward: through the recorded maxima only ---------------------------------------------------
// Max-pooling passes each window's gradient to its first maximum, so 3 of every 4 convolution
// outputs have a zero gradient: the convolutions' gradients are sums over the maxima only (a
// quarter of the dense multiply-adds), each a scaled copy of one input window (weight gradient)
// or of one output channel's weights (data gradient), added with full vectors.

// The offset of a pool window's maximum k (0..3, row-major) from the window's corner, in a plane
// of row stride S.
template <int S>
ALWAYS_INLINE int corner_offset(int k) {
    return (k >> 1) * S + (k & 1);
}

// cols (O*O, STRIDE): row p = the KxK window of src (C, S, S) under output pixel p of a valid
// convolution, O = S-K+1, in (c, i, j) order, zero padded to STRIDE. Each window row is copied as
// 8 floats (the 3 beyond it are overwritten by the next copy or zeroed): src needs 3 floats of slack.
template <int C, int S, int STRIDE>
ALWAYS_INLINE void windows(const float* src, float* cols) {
    constexpr int O = S - K + 1;
    static_assert(C * KK + 3 <= STRIDE, "room for the last copy's 3 extra floats");
    for (int y = 0; y < O; ++y)
        for (int x = 0; x < O; ++x) {
            float* d = cols + (y * O + x) * STRIDE;
            for (int c = 0; c < C; ++c)
#pragma GCC unroll 5
                for (int i = 0; i < K; ++i) std::memcpy(d + (c * K + i) * K, src + (c * S + y + i) * S + x, 8 * sizeof(float));
            std::memset(d + C * KK, 0, (STRIDE - C * KK) * sizeof(float));
        }
}

// The nonzero pool2 gradients of one image (dflat, maxima arg; C2 * 16) by output channel o:
// scale[o * 16 + e] and win[o * 16 + e] = p * STRIDE (its maximum's conv2 output pixel p), count[o]
// of them (16 unless a gradient is exactly zero); gb (C2) += the bias gradient; per_pixel, unless
// null: [p + 1] += the maxima at pixel p.
template <int STRIDE>
ALWAYS_INLINE void conv2_maxima(const float* dflat, const uint8_t* arg, float* gb, float* scale, int* win, int* count,
                                int* per_pixel) {
    constexpr int Q = Q2 * Q2;
    for (int o = 0; o < C2; ++o) {
        count[o] = 0;
        float bias = 0;
        for (int ph = 0; ph < Q2; ++ph)
            for (int pw = 0; pw < Q2; ++pw) {
                const int e = o * Q + ph * Q2 + pw;
                bias += dflat[e];
                if (dflat[e] == 0) continue;
                const int p = 2 * ph * S2 + 2 * pw + corner_offset<S2>(arg[e]);
                scale[o * Q + count[o]] = dflat[e], win[o * Q + count[o]++] = p * STRIDE;
                if (per_pixel) ++per_pixel[p + 1];
            }
        gb[o] += bias;
    }
}

// dplanes (C planes of pool1's gradient, 12x12) = the window gradients dcols (64 rows of STRIDE
// floats, C * 25 taps) added up into the planes they came from: 5 of 8 lanes per window row added
// in place; for all of conv2's channels window by window (the rows of dcols in order), for a few
// a column of windows at a time (the partly overlapping stores further apart in time).
template <int C, int STRIDE>
ALWAYS_INLINE void add_window_grads(const float* dcols, float* dplanes) {
    typedef int32_t I8 __attribute__((vector_size(32)));
    using V8 = typename Vec<8>::type;
    const I8 first5 = {-1, -1, -1, -1, -1, 0, 0, 0};
    std::fill(dplanes, dplanes + C * Q1 * Q1, 0.0f);
    constexpr bool BY_COLUMN = C < C1;
    for (int a = 0; a < S2; ++a)
        for (int b = 0; b < S2; ++b)
            for (int c = 0; c < C; ++c)
#pragma GCC unroll 5
                for (int i = 0; i < K; ++i) {
                    const int y = BY_COLUMN ? b : a, x = BY_COLUMN ? a : b;
                    float* d = dplanes + (c * Q1 + y + i) * Q1 + x;
                    const V8 row = V8(I8(load<8>(dcols + (y * S2 + x) * STRIDE + (c * K + i) * K)) & first5) + load<8>(d);
                    std::memcpy(d, &row, sizeof row);
                }
}

// out[0 .. NV*W) = (add ? out : 0) + sum over e < m of s[e] * (base + off[e])[0 .. NV*W).
template <int W, int NV>
ALWAYS_INLINE void add_scaled_rows(const float* s, const float* base, const int* off, int m, float* out, bool add) {
    using V = typename Vec<W>::type;
    V acc[NV];
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) acc[v] = add ? load<W>(out + v * W) : V{};
    for (int e = 0; e < m; ++e) {
        const float* row = base + off[e];
        asm("" : "+r"(row));   // one pointer, the vectors at fixed displacements (else GCC adds a lea per load)
#pragma GCC unroll 16
        for (int v = 0; v < NV; ++v) acc[v] += s[e] * load<W>(row + v * W);
    }
#pragma GCC unroll 16
    for (int v = 0; v < NV; ++v) std::memcpy(out + v * W, &acc[v], sizeof acc[v]);
}

// conv2's backward for one image, two forms (conv2_backward_t below): from its pool2 gradient
// dflat (C2 * 16) and maxima arg (C2 * 16): gw (C2, W2S) and gb (C2) += the weight and bias
// gradients; dpool1 (C1, 12, 12) = the gradient of pool1 (x, the conv2 input); both POOL1S.
// Both sum scaled rows: an output channel's weight gradient, its maxima's input windows; a
// window's gradient, the weights of the channels whose maximum it holds.

// AVX2 and generic: all 20 input channels' windows (rows of W2S floats), BLOCK columns at a time:
// the weight gradient per channel, then the window gradients per window, each in NV accumulators.
template <int W>
ALWAYS_INLINE void conv2_backward_rows(const float* w, const float* x, const float* dflat, const uint8_t* arg,
                                       float* gw, float* gb, float* dpool1, float* scratch) {
    constexpr int NV = 8, BLOCK = NV * W, Q = Q2 * Q2;
    static_assert(W2L % BLOCK == 0 && C1 * KK <= W2L, "whole passes over a row");
    float* cols = scratch;                        // (P2, W2S): conv2's input windows
    float* dcols = scratch + P2 * W2S;            // (P2, W2S): their gradients
    windows<C1, Q1, W2S>(x, cols);
    float scale[C2 * Q], by_pos[C2 * Q];          // the nonzero gradients by channel, and by window
    int win[C2 * Q], wrow[C2 * Q], count[C2], start[P2 + 1] = {};   // offsets of rows in cols and in w
    conv2_maxima<W2S>(dflat, arg, gb, scale, win, count, start);
    for (int p = 0; p < P2; ++p) start[p + 1] += start[p];
    int fill[P2];
    std::copy(start, start + P2, fill);
    for (int o = 0; o < C2; ++o)
        for (int e = 0; e < count[o]; ++e) {
            const int f = fill[win[o * Q + e] / W2S]++;
            by_pos[f] = scale[o * Q + e], wrow[f] = o * W2S;
        }
    for (int b = 0; b < W2L; b += BLOCK) {
        for (int o = 0; o < C2; ++o)
            add_scaled_rows<W, NV>(scale + o * Q, cols + b, win + o * Q, count[o], gw + o * W2S + b, true);
        for (int p = 0; p < P2; ++p)
            add_scaled_rows<W, NV>(by_pos + start[p], w + b, wrow + start[p], start[p + 1] - start[p],
                                   dcols + p * W2S + b, false);
    }
    add_window_grads<C1, W2S>(dcols, dpool1);
}

// AVX-512: CB2 input channels at a time (the last block the C1 % CB2 left): their 64 windows
// (CB2 * 25 taps padded to WC2 floats) and the windows' gradients, 40 KB, stay in or near L1; per
// output channel, in one pass over its maxima, its weight gradient in two partial sums of NV
// vectors and each maximum's window gradient += the channel's weights (NV registers), scaled. That
// reads and writes each window gradient vector per maximum, more instructions per multiply-add
// than the form above; with 32 registers it is the faster one (csrc/NOTES.md, v13), with AVX2's 16
// the slower. Blocks of 3 channels waste 5 of 80 lanes where blocks of 2 wasted 14 of 64 (v17).
// Two passes in registers instead (no stores per maximum): faster on Zen 4, slower on an Intel
// Xeon, so not kept (v19, v20).
// The slices are read and written as NV vectors from c * 25: the weight gradient's extra lanes add
// zeros (the windows' padding) to the next channels', done later; the window gradients' extra
// lanes (the next channels' weights) are never read.
template <int W, int CB>
ALWAYS_INLINE void conv2_backward_block(const float* w, const float* x, int c0, const float* scale, const int* win,
                                        const int* count, float* gw, float* dpool1, float* cols, float* dcols) {
    using V = typename Vec<W>::type;
    constexpr int NV = (CB * KK + W - 1) / W, SETS = 2, Q = Q2 * Q2;
    static_assert(NV * W <= WC2 && (C1 - CB) * KK + NV * W <= W2S, "rows of WC2; slices inside a weight row");
    windows<CB, Q1, WC2>(x + c0 * Q1 * Q1, cols);
    std::fill(dcols, dcols + P2 * WC2, 0.0f);
    for (int o = 0; o < C2; ++o) {
        const float* s = scale + o * Q;
        const int* off = win + o * Q;
        V acc[SETS][NV] = {}, wo[NV];
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) wo[v] = load<W>(w + o * W2S + c0 * KK + v * W);
        auto add = [&](int e, V* a) {
            const float* row = cols + off[e];
            float* drow = dcols + off[e];
            asm("" : "+r"(row), "+r"(drow));   // two pointers, the vectors at fixed displacements
#pragma GCC unroll 8
            for (int v = 0; v < NV; ++v) {
                a[v] += s[e] * load<W>(row + v * W);
                const V d = load<W>(drow + v * W) + s[e] * wo[v];
                std::memcpy(drow + v * W, &d, sizeof d);
            }
        };
        int e = 0;
        for (; e + SETS <= count[o]; e += SETS)
#pragma GCC unroll 2
            for (int t = 0; t < SETS; ++t) add(e + t, acc[t]);
        for (; e < count[o]; ++e) add(e, acc[0]);
        float* g = gw + o * W2S + c0 * KK;
#pragma GCC unroll 8
        for (int v = 0; v < NV; ++v) {
            const V sum = load<W>(g + v * W) + acc[0][v] + acc[1][v];
            std::memcpy(g + v * W, &sum, sizeof sum);
        }
    }
    add_window_grads<CB, WC2>(dcols, dpool1 + c0 * Q1 * Q1);
}

template <int W>
ALWAYS_INLINE void conv2_backward_blocks(const float* w, const float* x, const float* dflat, const uint8_t* arg,
                                         float* gw, float* gb, float* dpool1, float* scratch) {
    constexpr int Q = Q2 * Q2, LAST = C1 % CB2;
    static_assert(2 * P2 * WC2 + 16 <= BACK2_SCRATCH, "the scratch");
    float* cols = on_cache_line(scratch);        // (P2, WC2): the block's
    float* dcols = cols + P2 * WC2;               // windows and their gradients, on cache lines
    float scale[C2 * Q];
    int win[C2 * Q], count[C2];
    conv2_maxima<WC2>(dflat, arg, gb, scale, win, count, nullptr);
    int c0 = 0;
    for (; c0 + CB2 <= C1; c0 += CB2)
        conv2_backward_block<W, CB2>(w, x, c0, scale, win, count, gw, dpool1, cols, dcols);
    if constexpr (LAST > 0) conv2_backward_block<W, LAST>(w, x, c0, scale, win, count, gw, dpool1, cols, dcols);
}

template <int W>
ALWAYS_INLINE void conv2_backward_t(const float* w, const float* x, const float* dflat, const uint8_t* arg, float* gw,
                                    float* gb, float* dpool1, float* scratch) {
    if constexpr (W == 16) conv2_backward_blocks<W>(w, x, dflat, arg, gw, gb, dpool1, scratch);
    else conv2_backward_rows<W>(w, x, dflat, arg, gw, gb, dpool1, scratch);
}

// One image's conv1 weight and bias gradients from the pool1 gradient dpool1 (C1 * 144) and maxima
// arg: gw (C1, W1S), gb (C1) +=. x: the padded image (XPAD). Straight from the image (a window
// serves 5 channels on average, too few to pay for copying it out): per maximum, its window's 5
// rows (8 floats read, 5 used) times its gradient, into 5 row accumulators, in SETS partial sums
// so that the chains of multiply-adds overlap.
template <int W>
ALWAYS_INLINE void conv1_backward_t(const float* x, const float* dpool1, const uint8_t* arg, float* gw, float* gb) {
    using V8 = typename Vec<8>::type;
    constexpr int SETS = 2, Q = Q1 * Q1;
    static_assert(Q1 % SETS == 0 && Q % 8 == 0, "whole rounds");
    for (int c = 0; c < C1; ++c) {
        V8 acc[SETS][K] = {}, bias = {};
        for (int q = 0; q < Q; q += 8) bias += load<8>(dpool1 + c * Q + q);   // not one serial chain (v21)
        for (int ph = 0; ph < Q1; ++ph)   // by row and column: no division per maximum (v21)
            for (int pw = 0; pw < Q1; pw += SETS)
#pragma GCC unroll 4
                for (int t = 0; t < SETS; ++t) {
                    const int e = c * Q + ph * Q1 + pw + t;
                    const float* row = x + 2 * ph * S0 + 2 * (pw + t) + corner_offset<S0>(arg[e]);
#pragma GCC unroll 5
                    for (int i = 0; i < K; ++i) acc[t][i] += dpool1[e] * load<8>(row + i * S0);
                }
        for (int i = 0; i < K; ++i) {
            V8 sum = acc[0][i];
#pragma GCC unroll 4
            for (int t = 1; t < SETS; ++t) sum += acc[t][i];
            for (int j = 0; j < K; ++j) gw[c * W1S + i * K + j] += sum[j];
        }
        gb[c] += hsum<8>(bias);
    }
}

// W: floats per vector register; NB1, NB2: conv1's and conv2's channel blocks (accumulator
// registers: 32 zmm with AVX-512, 16 ymm / xmm otherwise); then the split by rows' two kernels, or
// nullptr, nullptr.
#define KERNELS(NAME, TARGET, W, NB1, NB2, ...)                                                                \
    TARGET void NAME##_conv1(const float* w, const float* b, const float* x, int o0, int o1, float* t,         \
                             float* y, uint8_t* a) { conv1_pool_t<W, NB1>(w, b, x, o0, o1, t, y, a); }         \
    TARGET void NAME##_conv2(const float* w, const float* b, const float* x, int o0, int o1, float* t,         \
                             float* y, uint8_t* a) { conv2_pool_t<W, NB2>(w, b, x, o0, o1, t, y, a); }         \
    TARGET void NAME##_fc1(const float* w, const float* b, const float* x, int n, int r0, int r1, float* y,    \
                           bool down) {                                                                        \
        dense_t<W, FLAT, HID, true>(w, b, x, n, r0, r1, y, down);                                              \
    }                                                                                                          \
    TARGET void NAME##_fc2(const float* w, const float* b, const float* x, int n, int r0, int r1, float* y) {  \
        dense_t<W, HID, OUT, false>(w, b, x, n, r0, r1, y);                                                    \
    }                                                                                                          \
    TARGET void NAME##_fc2_part(const float* w, const float* x, int c0, int c1, float* y) {                   \
        fc2_part_t<W>(w, x, c0, c1, y);                                                                        \
    }                                                                                                          \
    TARGET void NAME##_conv2_back(const float* w, const float* x, const float* d, const uint8_t* a, float* gw,  \
                                  float* gb, float* dx, float* t) { conv2_backward_t<W>(w, x, d, a, gw, gb, dx, t); } \
    TARGET void NAME##_conv1_back(const float* x, const float* d, const uint8_t* a, float* gw, float* gb) {       \
        conv1_backward_t<W>(x, d, a, gw, gb);                                                                  \
    }                                                                                                          \
    TARGET void NAME##_sparse_rows(const float* s, int ld, const int* i, const float* v, const int* b,         \
                                   const int* e, int cap, int r0, int r1, int c0, int c1, float alpha,         \
                                   bool add, float* y, int ldy) {                                              \
        sparse_rows_t<W>(s, ld, i, v, b, e, cap, r0, r1, c0, c1, alpha, add, y, ldy);                          \
    }                                                                                                          \
    const Kernels NAME = {#NAME, NB1, NB2, NAME##_conv1, NAME##_conv2, NAME##_fc1, NAME##_fc2, NAME##_fc2_part, \
                          NAME##_conv2_back, NAME##_conv1_back, NAME##_sparse_rows, __VA_ARGS__};

#define AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
AVX512 void avx512_conv1_rows(const float* w, const float* b, const float* x, int ph0, int ph1, float* y) {
    conv1_pool_pairs<5>(w, b, x, 0, C1, ph0, ph1, y, nullptr);
}
AVX512 void avx512_conv2_rows(const float* w, const float* b, const float* x, int h, float* t, float* y) {
    conv2_rows_512<10>(w, b, x, h, t, y);
}
AVX512 void avx512_fc1_half(const float* w, const float* b, const float* x, int h, int r0, int r1, float* part,
                            float* y, bool join, bool down) {
    fc1_halves_t<1>(w, b, x, h, r0, r1, part, y, join, down);
}
AVX512 void avx512_fc1_both(const float* w, const float* b, const float* flat, int r0, int r1, float* y, bool down) {
    fc1_halves_t<2>(w, b, flat, 0, r0, r1, nullptr, y, true, down);
}
KERNELS(avx512, AVX512, 16, 5, 5, avx512_conv1_rows, avx512_conv2_rows, avx512_fc1_half, avx512_fc1_both)
KERNELS(avx2, __attribute__((target("avx2,fma"))), 8, 2, 5, nullptr, nullptr, nullptr, nullptr)
KERNELS(generic, , 4, 10, 5, nullptr, nullptr, nullptr, nullptr)
#undef AVX512
#undef KERNELS

}  // namespace

const Kernels& kernels(const std::string& isa) {
    __builtin_cpu_init();
    const bool has512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
    const bool has2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (isa == "auto") return has512 ? avx512 : has2 ? avx2 : generic;
    if (isa == "generic") return generic;
    if (isa == "avx2" && has2) return avx2;
    if (isa == "avx512" && has512) return avx512;
    if (isa == "avx2" || isa == "avx512") throw std::invalid_argument("isa: this CPU has no " + isa);
    throw std::invalid_argument("isa: expected auto, avx512, avx2 or generic, got '" + isa + "'");
}

}  // namespace lenet::cblas
