// fused.cu: v3, the whole LeNet forward pass of one image in ONE launch (sm_90: thread block clusters).
//   x (N, 1, 28, 28) -> logits (N, 10); parameters in canonical layouts (OIHW conv, [out, in] dense).
// Launch geometry: grid (8 N), block 1024, compile-time cluster of 8 CTAs per image (one CTA per SM).
//   Weights are read from global memory (resident in L2 after the first call); activations never
//   leave shared memory. Each CTA computes 1/8 of every layer and the pieces are exchanged through
//   distributed shared memory (DSMEM) between cluster barriers:
//   1. every CTA: image -> smem; prefetch its slice of the conv2 filters into smem
//   2. conv1 + pool1 for channels c = rank, rank + 8, ...   (pool as you go: 4 sums, max, + bias)
//   3. barrier; gather the other 7 CTAs' pool1 channels -> full 20x12x12 in every CTA (11.5 KB)
//   4. conv2 + pool2 for pooled outputs [100 rank, 100 rank + 100): 800 threads = 400 conv outputs
//      x 2 halves of the input channels, then sum halves, max over the window, + bias
//   5. barrier; gather pool2 -> the full 800-vector (flatten order c, h, w) in every CTA
//   6. fc1 + ReLU for rows [63 rank, 63 rank + 63): one warp per row, float4 loads of the weights
//   7. fc2 partial sums over those rows (warp per logit); barrier; rank 0 adds the 8 partials + bias
//   8. barrier, so no CTA exits while rank 0 still reads its shared memory
// Forward only: training with variant 3 uses the v2 kernels (see _cuda_kernels.py).
// Compile-time constants come from python/lenet/backends/_cuda_kernels.py as -D options (DEFINES):
//   CLUSTER (8 CTAs per image), FUSED_THREADS (1024 per CTA), and the layer sizes of lenet.model:
//   IMAGE_HW (28), KSIZE (5), CONV1_OUT (20), CONV2_OUT (50), FC1_OUT (500), CLASSES (10). Pooling
//   is 2x2, stride 2 (a window position d is (d / 2, d % 2)). The static_asserts state what the work
//   split below needs of them.
#define P1 ((IMAGE_HW - KSIZE + 1) / 2)             // pool1 side: 12
#define P2 ((P1 - KSIZE + 1) / 2)                   // pool2 side: 4
#define FLAT (CONV2_OUT * P2 * P2)                  // pool2 flattened: 800
#define W2 (CONV1_OUT * KSIZE * KSIZE)              // one conv2 filter: 500
#define SLOTS ((CONV1_OUT + CLUSTER - 1) / CLUSTER) // conv1 channels per CTA: 3
#define FC1_ROWS ((FC1_OUT + CLUSTER - 1) / CLUSTER)  // fc1 rows per CTA: 63
#define OUT_PER_CTA (FLAT / CLUSTER)                // pooled conv2 outputs per CTA: 100
#define C2W_CHANNELS ((OUT_PER_CTA - 1) / (P2 * P2) + 2)  // conv2 output channels a CTA's outputs can touch: 8
static_assert(FLAT % CLUSTER == 0 && FLAT % 4 == 0 && CONV1_OUT % 2 == 0, "fused.cu: the split of pool2 and fc1");
static_assert(SLOTS * P1 * P1 <= FUSED_THREADS && 8 * OUT_PER_CTA <= FUSED_THREADS && CLASSES <= FUSED_THREADS / 32,
              "fused.cu: a thread per conv1 output slot, per conv2 output half, a warp per logit");
#define NEG_INF __int_as_float(0xff800000)   // -inf (NVRTC has no math.h INFINITY)

#ifndef LENET_CUEMU
__device__ __forceinline__ unsigned cluster_rank()
{
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ __forceinline__ void cluster_sync()     // all threads of all CTAs; release/acquire
{
    asm volatile("barrier.cluster.arrive;\n\tbarrier.cluster.wait;" ::: "memory");
}

__device__ __forceinline__ float load_remote(const float* local, unsigned rank)
{   // the same shared-memory variable in CTA `rank` of this cluster
    unsigned a, ra;
    float v;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(local));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(ra) : "memory");
    return v;
}
#else   // the CPU emulator of CUDA semantics (python/lenet/emu): the same three operations, as
        // macros so that each use is its own site
#define cluster_rank() cuemu_cluster_ctarank()
#define cluster_sync() cuemu_cluster_sync()
#define load_remote(local, rank) (*cuemu_map_shared(local, rank))
#endif

extern "C" __global__ void __cluster_dims__(CLUSTER, 1, 1) __launch_bounds__(FUSED_THREADS, 1)
lenet_forward_v3(const float* __restrict__ x, const float* __restrict__ c1w, const float* __restrict__ c1b,
                 const float* __restrict__ c2w, const float* __restrict__ c2b,
                 const float* __restrict__ f1w, const float* __restrict__ f1b,
                 const float* __restrict__ f2w, const float* __restrict__ f2b, float* __restrict__ logits)
{
    __shared__ float img[IMAGE_HW * IMAGE_HW];
    __shared__ float w2s[C2W_CHANNELS * W2];           // conv2 filters of this CTA's channels
    __shared__ float p1[CONV1_OUT * P1 * P1];          // pool1 (20, 12, 12)
    __shared__ float part[2][4 * OUT_PER_CTA];         // conv2 sums over channel halves
    __shared__ __align__(16) float p2[FLAT];           // pool2, flattened (50, 4, 4)
    __shared__ float h[FC1_ROWS];                      // relu(fc1) of this CTA's rows
    __shared__ float partial[CLASSES];                 // this CTA's share of the logits
    const unsigned r = cluster_rank();
    const int n = blockIdx.x / CLUSTER, t = threadIdx.x, warp = t / 32, lane = t % 32;
    const int q0 = r * OUT_PER_CTA, o_lo = q0 / (P2 * P2);   // first pooled output / conv2 channel

    // 1. image and conv2 filter slice -> shared memory
    for (int e = t; e < IMAGE_HW * IMAGE_HW; e += FUSED_THREADS) img[e] = x[n * (IMAGE_HW * IMAGE_HW) + e];
    for (int e = t; e < C2W_CHANNELS * W2 && o_lo * W2 + e < CONV2_OUT * W2; e += FUSED_THREADS) w2s[e] = c2w[o_lo * W2 + e];
    __syncthreads();

    // 2. conv1 + pool1: thread -> (slot, pooled pixel), channel c = r + 8 slot
    if (t < SLOTS * P1 * P1) {
        int c = r + CLUSTER * (t / (P1 * P1)), q = t % (P1 * P1), pi = q / P1, pj = q % P1;
        if (c < CONV1_OUT) {
            float w[KSIZE * KSIZE];
#pragma unroll
            for (int k = 0; k < KSIZE * KSIZE; ++k) w[k] = c1w[c * (KSIZE * KSIZE) + k];
            float m = NEG_INF;
#pragma unroll 1
            for (int d = 0; d < 4; ++d) {
                const float* ip = img + (2 * pi + d / 2) * IMAGE_HW + 2 * pj + d % 2;
                float s = 0.f;
#pragma unroll
                for (int ki = 0; ki < KSIZE; ++ki)
#pragma unroll
                    for (int kj = 0; kj < KSIZE; ++kj) s += ip[ki * IMAGE_HW + kj] * w[ki * KSIZE + kj];
                m = fmaxf(m, s);
            }
            p1[c * (P1 * P1) + q] = m + c1b[c];          // max(s + b) == max(s) + b: rounding is monotonic
        }
    }
    cluster_sync();

    // 3. gather pool1 channels owned by the other CTAs (owner of channel c is c % 8)
    for (int e = t; e < CONV1_OUT * P1 * P1; e += FUSED_THREADS) {
        unsigned owner = (e / (P1 * P1)) % CLUSTER;
        if (owner != r) p1[e] = load_remote(&p1[e], owner);
    }
    __syncthreads();

    // 4. conv2 + pool2: thread -> (half of the channels, pooled output, window position)
    if (t < 8 * OUT_PER_CTA) {
        int half = t / (4 * OUT_PER_CTA), u = t % (4 * OUT_PER_CTA), ql = u / 4, d = u % 4;
        int q = q0 + ql, o = q / (P2 * P2), oy = 2 * ((q % (P2 * P2)) / P2) + d / 2, ox = 2 * (q % P2) + d % 2;
        const float* wp = w2s + (o - o_lo) * W2 + half * (W2 / 2);
        const float* ip = p1 + half * (CONV1_OUT / 2) * (P1 * P1) + oy * P1 + ox;
        float s = 0.f;
        for (int c = 0; c < CONV1_OUT / 2; ++c)
#pragma unroll
            for (int ki = 0; ki < KSIZE; ++ki)
#pragma unroll
                for (int kj = 0; kj < KSIZE; ++kj) s += ip[c * (P1 * P1) + ki * P1 + kj] * wp[c * (KSIZE * KSIZE) + ki * KSIZE + kj];
        part[half][u] = s;
    }
    __syncthreads();
    if (t < OUT_PER_CTA) {
        float m = NEG_INF;
#pragma unroll
        for (int d = 0; d < 4; ++d) m = fmaxf(m, part[0][4 * t + d] + part[1][4 * t + d]);
        p2[q0 + t] = m + c2b[(q0 + t) / (P2 * P2)];
    }
    cluster_sync();

    // 5. gather pool2 (owner of element e is e / 100)
    for (int e = t; e < FLAT; e += FUSED_THREADS) {
        unsigned owner = e / OUT_PER_CTA;
        if (owner != r) p2[e] = load_remote(&p2[e], owner);
    }
    __syncthreads();

    // 6. fc1 + ReLU, warp per row
    const int row0 = r * FC1_ROWS, rows = min(FC1_ROWS, FC1_OUT - row0);
    const float4* xv = reinterpret_cast<const float4*>(p2);
    for (int k = warp; k < rows; k += FUSED_THREADS / 32) {
        const float4* wr = reinterpret_cast<const float4*>(f1w + (row0 + k) * FLAT);
        float s = 0.f;
        for (int j = lane; j < FLAT / 4; j += 32) {
            float4 a = __ldg(wr + j), v = xv[j];
            s += a.x * v.x + a.y * v.y + a.z * v.z + a.w * v.w;
        }
        for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
        if (lane == 0) h[k] = fmaxf(s + f1b[row0 + k], 0.f);
    }
    __syncthreads();

    // 7. fc2 over this CTA's rows, warp per logit; rank 0 sums the partials of the cluster
    if (warp < CLASSES) {
        float s = 0.f;
        for (int k = lane; k < rows; k += 32) s += f2w[warp * FC1_OUT + row0 + k] * h[k];
        for (int off = 16; off > 0; off /= 2) s += __shfl_down_sync(0xffffffffu, s, off);
        if (lane == 0) partial[warp] = s;
    }
    cluster_sync();
    if (r == 0 && t < CLASSES) {
        float s = f2b[t];
        for (unsigned q = 0; q < CLUSTER; ++q) s += load_remote(&partial[t], q);
        logits[n * CLASSES + t] = s;
    }
    cluster_sync();                                    // 8. keep shared memory alive for rank 0
}
