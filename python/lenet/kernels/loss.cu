// loss.cu: mean softmax cross-entropy over the batch and its gradient with respect to the logits.
//   z (N, 10) logits, y (N) int32 labels -> dz (N, 10), loss (1)
//   loss = mean_n (logsumexp(z[n]) - z[n, y[n]]);   dz[n, k] = (softmax(z[n])[k] - [k == y[n]]) / N
// Launch geometry: ONE block of LOSS_THREADS threads; threads stride over the samples, then a
// shared-memory tree reduction sums the per-sample losses (the batch is small during training).
// One version serves every kernel version. (Inference returns logits; softmax happens here.)
// Compile-time constants come from python/lenet/backends/_cuda_kernels.py as -D options (DEFINES):
//   CLASSES (10), LOSS_THREADS (the block, a power of two).

extern "C" __global__ void softmax_xent(const float* __restrict__ z, const int* __restrict__ y,
                                        float* __restrict__ dz, float* __restrict__ loss, int N)
{
    __shared__ float sums[LOSS_THREADS];
    float mine = 0.f;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        const float* zn = z + (long)n * CLASSES;
        float m = zn[0];
        for (int k = 1; k < CLASSES; ++k) m = fmaxf(m, zn[k]);
        float s = 0.f;
        for (int k = 0; k < CLASSES; ++k) s += expf(zn[k] - m);
        float lse = m + logf(s);
        mine += lse - zn[y[n]];
        for (int k = 0; k < CLASSES; ++k)
            dz[(long)n * CLASSES + k] = (expf(zn[k] - lse) - (k == y[n] ? 1.f : 0.f)) / N;
    }
    sums[threadIdx.x] = mine;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s /= 2) {            // blockDim.x is a power of two
        if (threadIdx.x < s) sums[threadIdx.x] += sums[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = sums[0] / N;
}
