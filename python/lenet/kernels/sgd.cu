// sgd.cu: the plain SGD update over every parameter at once.
//   p (n), g (n): p[i] -= lr * g[i]; parameters and gradients each live in one flat buffer,
//   so a single launch updates the whole network. Grid-stride loop, 256-thread blocks.
// One version serves every kernel version.
extern "C" __global__ void sgd_update(float* __restrict__ p, const float* __restrict__ g, float lr, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        p[i] -= lr * g[i];
}
