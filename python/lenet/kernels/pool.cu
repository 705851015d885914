// pool.cu: 2x2 max pooling, stride 2, forward and backward.
//   x (NC, H, W) -> y (NC, H/2, W/2), H and W even; NC = batch x channels
//   forward:  y[p,i,j] = max of the window x[p, 2i:2i+2, 2j:2j+2]
//   backward: dx gets dy at the FIRST maximum of each window in row-major order, 0 elsewhere;
//             each thread writes all four elements of its window, so dx needs no clearing.
// Launch geometry (python/lenet/backends/_cuda_kernels.py): one thread per output element,
// 1-D grid of 256-thread blocks. One version serves v1 and v2 (memory-bound, nothing to tile).
extern "C" __global__ void maxpool_forward(const float* __restrict__ x, float* __restrict__ y,
                                           int NC, int H, int W)
{
    int PH = H / 2, PW = W / 2;
    long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (idx >= (long)NC * PH * PW) return;
    int j = idx % PW, i = (idx / PW) % PH;
    long p = idx / ((long)PW * PH);
    const float* xp = x + (p * H + 2 * i) * W + 2 * j;
    y[idx] = fmaxf(fmaxf(xp[0], xp[1]), fmaxf(xp[W], xp[W + 1]));
}

extern "C" __global__ void maxpool_backward(const float* __restrict__ dy, const float* __restrict__ x,
                                            float* __restrict__ dx, int NC, int H, int W)
{
    int PH = H / 2, PW = W / 2;
    long idx = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (idx >= (long)NC * PH * PW) return;
    int j = idx % PW, i = (idx / PW) % PH;
    long p = idx / ((long)PW * PH);
    const float* xp = x + (p * H + 2 * i) * W + 2 * j;     // the window, row-major: k -> (k/2, k%2)
    float* dxp = dx + (p * H + 2 * i) * W + 2 * j;
    int first = 0;
    float best = xp[0];
#pragma unroll
    for (int k = 1; k < 4; ++k) {
        float v = xp[(k / 2) * W + k % 2];
        if (v > best) { best = v; first = k; }               // strict: ties keep the first
    }
    float g = dy[idx];
#pragma unroll
    for (int k = 0; k < 4; ++k) dxp[(k / 2) * W + k % 2] = k == first ? g : 0.f;
}
