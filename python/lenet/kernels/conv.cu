// conv.cu: 5x5 convolution (cross-correlation, stride 1, no padding) forward and backward.
//   x  (N, C, H, W)   w (O, C, 5, 5)   b (O)   y (N, O, OH, OW)   OH = H - 4, OW = W - 4
//   forward:          y[n,o,i,j] = b[o] + sum_{c,ki,kj} x[n,c,i+ki,j+kj] w[o,c,ki,kj]
//   backward data:    dx[n,c,h,v] = sum_{o,ki,kj} dy[n,o,h-ki,v-kj] w[o,c,ki,kj]  (valid terms)
//   backward filter:  dw[o,c,ki,kj] = sum_{n,i,j} dy[n,o,i,j] x[n,c,i+ki,j+kj]
//   (the bias gradient is bias_backward in dense.cu, shared with the dense layers)
// Launch geometry lives in python/lenet/backends/_cuda_kernels.py.
// v1 conv_forward_v1 / conv_backward_data_v1 / conv_backward_filter_v1: one thread per output
//    element, everything read straight from global memory; 1-D grid of 256-thread blocks.
// v2 conv_forward_v2: block (n, group of CONV_OT output channels), one thread per output pixel
//    (blockDim.x >= OH*OW); each input channel plane and its CONV_OT 5x5 filters are staged in
//    shared memory, every thread keeps CONV_OT accumulators in registers.
// v2 conv_backward_filter_v2: block (o, c), threads stride over (n, i, j) keeping the 25 sums of
//    one filter in registers, then a warp-shuffle + shared-memory block reduction.
// Compile-time constants come from python/lenet/backends/_cuda_kernels.py as -D options (DEFINES):
//   KSIZE (5), CONV_OT (output channels per v2 block), CONV_MAX_HW (largest input plane, 28 x 28).

extern "C" __global__ void conv_forward_v1(const float* __restrict__ x, const float* __restrict__ w,
                                           const float* __restrict__ b, float* __restrict__ y,
                                           int N, int C, int H, int W, int O)
{
    int OH = H - KSIZE + 1, OW = W - KSIZE + 1;
    long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (idx >= (long)N * O * OH * OW) return;
    int j = idx % OW, i = (idx / OW) % OH, o = (idx / ((long)OW * OH)) % O;
    long n = idx / ((long)OW * OH * O);
    float acc = b[o];
    for (int c = 0; c < C; ++c) {
        const float* xp = x + ((n * C + c) * H + i) * W + j;
        const float* wp = w + (o * C + c) * KSIZE * KSIZE;
        for (int ki = 0; ki < KSIZE; ++ki)
            for (int kj = 0; kj < KSIZE; ++kj)
                acc += xp[ki * W + kj] * wp[ki * KSIZE + kj];
    }
    y[idx] = acc;
}

extern "C" __global__ void conv_forward_v2(const float* __restrict__ x, const float* __restrict__ w,
                                           const float* __restrict__ b, float* __restrict__ y,
                                           int N, int C, int H, int W, int O)
{
    // grid (N, O / CONV_OT), block (>= OH*OW)
    __shared__ float xs[CONV_MAX_HW];          // one input channel plane, H x W
    __shared__ float ws[CONV_OT * KSIZE * KSIZE];      // its CONV_OT filters, 5 x 5 each
    int OH = H - KSIZE + 1, OW = W - KSIZE + 1;
    int n = blockIdx.x, o0 = blockIdx.y * CONV_OT, p = threadIdx.x;
    int i = p / OW, j = p % OW;
    float acc[CONV_OT];
#pragma unroll
    for (int t = 0; t < CONV_OT; ++t) acc[t] = 0.f;
    for (int c = 0; c < C; ++c) {
        __syncthreads();                       // previous channel fully consumed
        for (int e = threadIdx.x; e < H * W; e += blockDim.x)
            xs[e] = x[((long)n * C + c) * H * W + e];
        for (int e = threadIdx.x; e < CONV_OT * KSIZE * KSIZE; e += blockDim.x) {
            int t = e / (KSIZE * KSIZE), k = e % (KSIZE * KSIZE);
            ws[e] = w[((o0 + t) * C + c) * KSIZE * KSIZE + k];
        }
        __syncthreads();
        if (p < OH * OW) {
#pragma unroll
            for (int ki = 0; ki < KSIZE; ++ki)
#pragma unroll
                for (int kj = 0; kj < KSIZE; ++kj) {
                    float v = xs[(i + ki) * W + j + kj];
#pragma unroll
                    for (int t = 0; t < CONV_OT; ++t) acc[t] += v * ws[t * KSIZE * KSIZE + ki * KSIZE + kj];
                }
        }
    }
    if (p < OH * OW)
#pragma unroll
        for (int t = 0; t < CONV_OT; ++t)
            y[(((long)n * O + o0 + t) * OH + i) * OW + j] = acc[t] + b[o0 + t];
}

extern "C" __global__ void conv_backward_data_v1(const float* __restrict__ dy, const float* __restrict__ w,
                                                 float* __restrict__ dx, int N, int C, int H, int W, int O)
{
    int OH = H - KSIZE + 1, OW = W - KSIZE + 1;
    long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (idx >= (long)N * C * H * W) return;
    int v = idx % W, h = (idx / W) % H, c = (idx / ((long)W * H)) % C;
    long n = idx / ((long)W * H * C);
    float acc = 0.f;
    for (int o = 0; o < O; ++o)
        for (int ki = 0; ki < KSIZE; ++ki) {
            int i = h - ki;
            if (i < 0 || i >= OH) continue;
            for (int kj = 0; kj < KSIZE; ++kj) {
                int j = v - kj;
                if (j < 0 || j >= OW) continue;
                acc += dy[((n * O + o) * OH + i) * OW + j] * w[((o * C + c) * KSIZE + ki) * KSIZE + kj];
            }
        }
    dx[idx] = acc;
}

extern "C" __global__ void conv_backward_filter_v1(const float* __restrict__ dy, const float* __restrict__ x,
                                                   float* __restrict__ dw, int N, int C, int H, int W, int O)
{
    int OH = H - KSIZE + 1, OW = W - KSIZE + 1;
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= O * C * KSIZE * KSIZE) return;
    int kj = idx % KSIZE, ki = (idx / KSIZE) % KSIZE, c = (idx / (KSIZE * KSIZE)) % C, o = idx / (KSIZE * KSIZE * C);
    float acc = 0.f;
    for (long n = 0; n < N; ++n)
        for (int i = 0; i < OH; ++i)
            for (int j = 0; j < OW; ++j)
                acc += dy[((n * O + o) * OH + i) * OW + j] * x[((n * C + c) * H + i + ki) * W + j + kj];
    dw[idx] = acc;
}

extern "C" __global__ void conv_backward_filter_v2(const float* __restrict__ dy, const float* __restrict__ x,
                                                   float* __restrict__ dw, int N, int C, int H, int W, int O)
{
    // grid (C, O), block 256 (a multiple of 32, at most 1024)
    __shared__ float part[32][KSIZE * KSIZE];          // one row of 25 partial sums per warp
    int OH = H - KSIZE + 1, OW = W - KSIZE + 1;
    int c = blockIdx.x, o = blockIdx.y;
    float acc[KSIZE * KSIZE];
#pragma unroll
    for (int k = 0; k < KSIZE * KSIZE; ++k) acc[k] = 0.f;
    long total = (long)N * OH * OW;
    for (long e = threadIdx.x; e < total; e += blockDim.x) {
        int j = e % OW, i = (e / OW) % OH;
        long n = e / ((long)OW * OH);
        float g = dy[((n * O + o) * OH + i) * OW + j];
        const float* xp = x + ((n * C + c) * H + i) * W + j;
#pragma unroll
        for (int ki = 0; ki < KSIZE; ++ki)
#pragma unroll
            for (int kj = 0; kj < KSIZE; ++kj) acc[ki * KSIZE + kj] += g * xp[ki * W + kj];
    }
    int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int k = 0; k < KSIZE * KSIZE; ++k) {
        float v = acc[k];
        for (int s = 16; s > 0; s /= 2) v += __shfl_down_sync(0xffffffffu, v, s);
        if (lane == 0) part[warp][k] = v;
    }
    __syncthreads();
    if (threadIdx.x < KSIZE * KSIZE) {
        float v = 0.f;
        for (int q = 0; q < blockDim.x / 32; ++q) v += part[q][threadIdx.x];
        dw[(o * C + c) * KSIZE * KSIZE + threadIdx.x] = v;
    }
}
