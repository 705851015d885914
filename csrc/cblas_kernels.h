// cblas backend, internal: the vector kernels (cblas_kernels.cpp), one source compiled for three
// instruction sets (AVX-512, AVX2+FMA, generic x86-64) and picked at load time, so the module runs
// on any x86-64 without -march=native; and the sizes of the buffers they work on.
#pragma once
#include <cstdint>
#include <string>

#include "model.h"

namespace lenet::cblas {
using namespace model;

constexpr int R1 = S1 * S0;       // a conv1 output plane in row-stride-28 layout (columns 24..27 unused; AVX2, generic)
constexpr int CONV1S = C1 * R1;   // conv1's output planes (AVX2 and generic: AVX-512 pools from registers)
constexpr int XPAD = IMG + 16;    // an image padded so conv1's last vector loads stay inside
// The conv weights here: rows (one per output channel) zero padded to W1S and W2S floats, conv2's
// used W2L at a time (whole vectors), its stride off a power of two (rows a power of two apart
// would share a handful of L1 sets).
constexpr int W1S = 32, W2L = 512, W2S = W2L + 16;
constexpr int POOL1S = POOL1 + 16;   // a pool1 output (or its gradient) with the slack conv2's backward uses
// conv2's AVX-512 backward: CB2 input channels' taps at a time (the last block the rest), rows of WC2
constexpr int CB2 = 3, WC2 = 80;
// conv2's forward scratch: with AVX-512 its input's row pairs (C1, K, 8 vectors of 16, on a cache
// line), otherwise its planes (C2, 64)
constexpr int CONV2S = C1 * K * 8 * 16 + 16;
static_assert(C2 * P2 <= CONV2S, "conv2's planes fit its scratch");
constexpr int BACK2_SCRATCH = 2 * P2 * W2S;   // floats (covers 2 * P2 * WC2 + 16)
constexpr int SPARSE_BLOCK = 80;    // sparse_rows' column ranges: multiples of 5 vectors of any width
constexpr int FC1_BLOCK = 5;        // fc1_half's pairs of rows at a time (its FMA chains, its weights' blocks)

struct Kernels {
    const char* isa;
    int conv1_block, conv2_block;   // conv1_pool's and conv2_pool's channel ranges: multiples of these
    // Weights w in the layouts here (W1S, W2S row strides).
    // conv1 + pool1 for output channels [o0, o1) (multiples of conv1_block) of one padded image x (XPAD):
    // conv (C1, R1; CONV1S floats) scratch (unused by AVX-512), pool (C1, 12, 12), bias added after the max;
    // arg (C1, 12, 12) the first maximum of each window in row-major order (0..3), or null (inference).
    void (*conv1_pool)(const float* w, const float* bias, const float* x, int o0, int o1, float* conv, float* pool,
                       uint8_t* arg);
    // conv2 + pool2 for output channels [o0, o1) (multiples of conv2_block) of pool1 x (C1, 12, 12): conv
    // (CONV2S floats) scratch, one per concurrent call; flat (C2 * 16) = pool2 in (c, h, w) order,
    // arg (C2 * 16) or null.
    void (*conv2_pool)(const float* w, const float* bias, const float* x, int o0, int o1, float* conv, float* flat,
                       uint8_t* arg);
    // y[b, r] = bias[r] + w[r, :] · x[b, :] for n images and rows [r0, r1) of fc1 (then ReLU; x (n,
    // 800), y (n, 500); down: its rows' blocks read last to first, the same sums) or fc2 (x (n, 500),
    // y (n, 10)).
    void (*fc1_relu)(const float* w, const float* bias, const float* x, int n, int r0, int r1, float* y, bool down);
    void (*fc2)(const float* w, const float* bias, const float* x, int n, int r0, int r1, float* y);
    // One image's fc2 over inputs [c0, c1) only, no bias: y[0:16] = the sum over h of x[h] * w[h,
    // 0:16], w fc2's weights by input (HID, 16: outputs zero padded), for the unit of fc1 that
    // computed those inputs; the same bits for the same [c0, c1).
    void (*fc2_part)(const float* w, const float* x, int c0, int c1, float* y);
    // Backward, one image, through the pools' recorded maxima only. conv2: from the pool2 gradient
    // dflat (C2 * 16) and arg (C2 * 16): gw (C2, W2S), gb (C2) += weight and bias gradients; dpool1
    // (C1, 12, 12) = the gradient of conv2's input x (pool1); both POOL1S. scratch: BACK2_SCRATCH floats.
    void (*conv2_backward)(const float* w, const float* x, const float* dflat, const uint8_t* arg, float* gw,
                           float* gb, float* dpool1, float* scratch);
    // conv1: from the pool1 gradient dpool1 and arg (C1, 12, 12) of the padded image x (XPAD):
    // gw (C1, W1S), gb (C1) +=.
    void (*conv1_backward)(const float* x, const float* dpool1, const uint8_t* arg, float* gw, float* gb);
    // fc1's gradients over its nonzero ReLU gradients only: for rows r in [r0, r1) of a sparse matrix
    // (terms k in [begin[r], end[r]), begin null: from 0; column idx[r * cap + k], value val[r * cap
    // + k]), y[r, c0:c1] = (add ? y[r, c0:c1] : 0) + alpha * sum of val * src[idx, c0:c1]; row
    // strides ld and ldy, c0 and c1 multiples of SPARSE_BLOCK. Rows of src and y on 64-byte
    // boundaries are fastest.
    void (*sparse_rows)(const float* src, int ld, const int* idx, const float* val, const int* begin, const int* end,
                        int cap, int r0, int r1, int c0, int c1, float alpha, bool add, float* y, int ldy);
    // One image split by rows instead (AVX-512 only, else null): conv1 + pool1 for pool1 rows
    // [ph0, ph1) of all channels into pool (C1, 12, 12; other rows untouched), inference only; conv2 +
    // pool2 for pool2 rows [2h, 2h + 2) of all channels from pool1 rows [4h, 4h + 8) of x, conv
    // (CONV2S floats) scratch, into y (C2, 8): flat's entries [16 c + 8h, 16 c + 8h + 8).
    void (*conv1_rows)(const float* w, const float* bias, const float* x, int ph0, int ph1, float* pool);
    void (*conv2_rows)(const float* w, const float* bias, const float* x, int h, float* conv, float* y);
    // fc1 by halves of its inputs (AVX-512 only, else null): rows [r0, r1) (whole blocks of 2 FC1_BLOCK)
    // of w (fc1's weights by halves h of flat, blocks of pairs of rows, each half read in one stream:
    // Net::make_single_weights) over half h's 400 inputs x (C2, 8: flat's entries 16 c + 8 h .. 16 c + 8 h
    // + 7, as y of conv2_rows): without join, part (HID, 8) gets the rows' 8 sums over half h; with
    // join, y[r] = ReLU(bias[r] + those sums and part's). fc1_both: over both halves of flat at once,
    // the same sums. down: the rows' blocks read last to first.
    void (*fc1_half)(const float* w, const float* bias, const float* x, int h, int r0, int r1, float* part, float* y,
                     bool join, bool down);
    void (*fc1_both)(const float* w, const float* bias, const float* flat, int r0, int r1, float* y, bool down);
};

// "auto" (the best this CPU has), "avx512", "avx2" or "generic"; std::invalid_argument otherwise or
// if this CPU lacks it.
const Kernels& kernels(const std::string& isa);

}  // namespace lenet::cblas
