// dense.cu: fully connected layers forward and backward, and the bias gradient of every layer.
//   x (N, IN)   w (OUT, IN)   b (OUT)   y (N, OUT)
//   forward:          y = x w^T + b, then ReLU when asked
//   backward data:    dx = dy w, times the ReLU mask (a > 0) of the layer below when asked
//   backward weight:  dw = dy^T x
//   bias_backward:    db[o] = sum_{n,p} dy[n, o, p] over dy (N, O, P); P = 1 for dense, OH*OW for conv
// Launch geometry lives in python/lenet/backends/_cuda_kernels.py.
// v1 dense_forward_v1 / dense_backward_data_v1 / dense_backward_weight_v1: one thread per output
//    element, dot products straight from global memory; 1-D grid of 256-thread blocks.
// v2 gemm_v2: one tiled GEMM for all three products, C[M, Nc] = A[M, K] B[K, Nc] with A and B
//    given by element strides (so w^T and dy^T need no copy); 16x16 output tile per block,
//    16x16 tiles of A and B staged in shared memory with coalesced loads whichever stride is 1;
//    epilogue flags: 1 add bias[n], 2 ReLU, 4 multiply by (mask[m, n] > 0).
// bias_backward: block per output channel o, threads stride over (n, p), tree reduction.
// Compile-time constants come from python/lenet/backends/_cuda_kernels.py as -D options (DEFINES):
//   TILE (gemm_v2 tile edge and block edge), BIAS_THREADS (bias_backward block, a power of two).

extern "C" __global__ void dense_forward_v1(const float* __restrict__ x, const float* __restrict__ w,
                                            const float* __restrict__ b, float* __restrict__ y,
                                            int N, int IN, int OUT, int relu)
{
    long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (idx >= (long)N * OUT) return;
    int o = idx % OUT;
    long n = idx / OUT;
    float acc = b[o];
    for (int k = 0; k < IN; ++k) acc += x[n * IN + k] * w[(long)o * IN + k];
    y[idx] = relu ? fmaxf(acc, 0.f) : acc;
}

extern "C" __global__ void dense_backward_data_v1(const float* __restrict__ dy, const float* __restrict__ w,
                                                  const float* __restrict__ mask, float* __restrict__ dx,
                                                  int N, int IN, int OUT, int use_mask)
{
    long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (idx >= (long)N * IN) return;
    int k = idx % IN;
    long n = idx / IN;
    float acc = 0.f;
    for (int o = 0; o < OUT; ++o) acc += dy[n * OUT + o] * w[(long)o * IN + k];
    dx[idx] = use_mask && !(mask[idx] > 0.f) ? 0.f : acc;
}

extern "C" __global__ void dense_backward_weight_v1(const float* __restrict__ dy, const float* __restrict__ x,
                                                    float* __restrict__ dw, int N, int IN, int OUT)
{
    long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (idx >= (long)OUT * IN) return;
    int k = idx % IN, o = idx / IN;
    float acc = 0.f;
    for (long n = 0; n < N; ++n) acc += dy[n * OUT + o] * x[n * IN + k];
    dw[idx] = acc;
}

extern "C" __global__ void gemm_v2(const float* __restrict__ A, const float* __restrict__ B,
                                   float* __restrict__ C, const float* __restrict__ bias,
                                   const float* __restrict__ mask, int M, int Nc, int K,
                                   int sam, int sak, int sbk, int sbn, int flags)
{
    // grid (ceil(Nc / 16), ceil(M / 16)), block (16, 16)
    __shared__ float As[TILE][TILE + 1];       // [m][k], +1 column against bank conflicts
    __shared__ float Bs[TILE][TILE + 1];       // [k][n]
    int tx = threadIdx.x, ty = threadIdx.y;
    int m0 = blockIdx.y * TILE, n0 = blockIdx.x * TILE;
    // the thread that loads tile element (r, q) is chosen so consecutive tx read consecutive addresses
    int ar = sak == 1 ? ty : tx, aq = sak == 1 ? tx : ty;       // A: r along m, q along k
    int bk = sbn == 1 ? ty : tx, bn = sbn == 1 ? tx : ty;       // B: k, n
    float acc = 0.f;
    for (int k0 = 0; k0 < K; k0 += TILE) {
        As[ar][aq] = m0 + ar < M && k0 + aq < K ? A[(long)(m0 + ar) * sam + (long)(k0 + aq) * sak] : 0.f;
        Bs[bk][bn] = k0 + bk < K && n0 + bn < Nc ? B[(long)(k0 + bk) * sbk + (long)(n0 + bn) * sbn] : 0.f;
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < TILE; ++kk) acc += As[ty][kk] * Bs[kk][tx];
        __syncthreads();
    }
    int m = m0 + ty, n = n0 + tx;
    if (m >= M || n >= Nc) return;
    long at = (long)m * Nc + n;
    if (flags & 1) acc += bias[n];
    if (flags & 2) acc = fmaxf(acc, 0.f);
    if ((flags & 4) && !(mask[at] > 0.f)) acc = 0.f;
    C[at] = acc;
}

extern "C" __global__ void bias_backward(const float* __restrict__ dy, float* __restrict__ db,
                                         int N, int O, int P)
{
    // grid (O), block BIAS_THREADS
    __shared__ float sums[BIAS_THREADS];
    int o = blockIdx.x;
    float acc = 0.f;
    for (long e = threadIdx.x; e < (long)N * P; e += blockDim.x)
        acc += dy[((e / P) * O + o) * P + e % P];
    sums[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) db[o] = sums[0];
}
