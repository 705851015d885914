// cuemu.h: the prelude that lets g++ compile CUDA C kernels unchanged for lenet's CPU emulator of
// CUDA semantics (python/lenet/emu; docs/emulator.md). Correctness only: nothing it runs is timed.
//
// CONTRACT
//   Compile a translation unit of CUDA C with
//       g++ -std=c++17 -O2 -g -fsanitize=thread --param tsan-instrument-func-entry-exit=0
//           -DLENET_CUEMU -include cuemu.h [the -D options nvcc/NVRTC get] -c unit.cpp
//   (the TSan instrumentation calls the runtime's own __tsan_* hooks: libtsan is never linked, so
//   link WITHOUT -fsanitize) and link it into a shared object against the runtime (runtime.cpp,
//   fiber.cpp, shadow.cpp, built by lenet.emu.runtime). Two kinds of unit:
//   - NVRTC-style .cu files (no CUDA headers): this prelude supplies dim3/uint3/float4 itself.
//   - a unit that ALSO includes the real <cuda_runtime.h> (e.g. csrc/cudnn_net.cu): add
//     -DCUEMU_CUDA_RUNTIME -I<cuda include dir>; the prelude then includes <cuda_runtime.h> first
//     and uses its vector types. cuda_runtime.h keeps the __global__/__shared__/... defined here.
//   The built-ins (threadIdx, blockIdx, blockDim, gridDim, warpSize, __syncthreads, __shfl_*_sync,
//   __ldg, min/max, __int_as_float, __float_as_int, math from <cmath>) are provided; cluster
//   operations are cuemu_cluster_ctarank(), cuemu_cluster_sync(), cuemu_map_shared(p, rank)
//   (DSMEM). Not provided (a compile error, never a silent wrong answer): atomics, dynamic
//   (extern) shared memory, __syncwarp, votes, textures, inline PTX, <<<...>>> launches.
//
// LAUNCHING FROM C++ (every launch is synchronous; it returns 0 on success, else the number of
// reports it made, repeats of earlier ones included; the reports are read, places as file:line,
// with cuemu_report_count()/cuemu_report_at(), and forgotten with cuemu_clear_reports()):
//       int cuemu::launch(kernel, dim3 grid, dim3 block, args...);        // types deduced from kernel
//       int cuemu::launch_packed(kernel, dim3 grid, dim3 block, void** args); // args[i] -> i-th argument
//       const char* cuemu::refusal(kernel, dim3 grid, dim3 block);  // why sm_90 refuses it, or ""
//   With CUEMU_CUDA_RUNTIME and CUEMU_LAUNCH_NOW, `cudaLaunchKernel(kernel, grid, block, args,
//   shmem, stream)` on a kernel function resolves to the overload below (more specialised than
//   cuda_runtime.h's template) and runs at once: cudaSuccess, or cudaErrorLaunchFailure after a
//   report. A unit whose own cudaLaunchKernel queues work on a stream model leaves
//   CUEMU_LAUNCH_NOW undefined and calls cuemu::launch(...) when the queued launch runs.
//   Cluster dims come from __cluster_dims__ on the kernel (recorded in its ELF section name);
//   device memory must come from cuemu_malloc (checked, poisoned with NaN bytes, uninitialised);
//   copies go through cuemu_memcpy_htod/dtoh, and host code that writes device memory itself
//   says so with cuemu_mark_written (else a kernel reading it is told "uninitialised"); host code
//   that reads it asks cuemu_first_unwritten whether all of it was written.
#pragma once
#define LENET_CUEMU_PRELUDE 1

// --- qualifiers (defined before cuda_runtime.h, which keeps ours when not compiled by nvcc)
#define CUEMU_STR2(x) #x
#define CUEMU_STR(x) CUEMU_STR2(x)
#define __host__
#define __device__
#define __global__
// each __shared__ variable comes after a red zone of its own (64 bytes no variable owns, never
// written), so that an access past one variable into its neighbour is out of bounds, naming it
#define CUEMU_REDZONE2(n) __attribute__((section("cuemu_shared"), used, aligned(16))) static char cuemu_redzone_##n[64];
#define CUEMU_REDZONE(n) CUEMU_REDZONE2(n)
#define __shared__ CUEMU_REDZONE(__COUNTER__) __attribute__((section("cuemu_shared"))) static
#define __forceinline__ inline __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict
#define __launch_bounds__(...)
// a kernel with a compile-time cluster lives in the section "cuemu_cluster_X_Y_Z": the runtime
// reads the cluster shape from there (integer literals or macros expanding to them)
#define __cluster_dims__(x, y, z) \
    __attribute__((section("cuemu_cluster_" CUEMU_STR(x) "_" CUEMU_STR(y) "_" CUEMU_STR(z)), noinline))

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <type_traits>
#include <utility>

#ifdef CUEMU_CUDA_RUNTIME
#include <cuda_runtime.h>
#undef __forceinline__
#define __forceinline__ inline __attribute__((always_inline))
#else
struct uint3 { unsigned x, y, z; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
// Vector types: one copy is one access of the whole vector (a GPU's ld.v4/st.v4), checked as such
// (alignment included) even where the compiler would load the fields one by one.
extern "C" void cuemu_vector_access(const void* p, size_t bytes, int write);
__attribute__((no_sanitize("thread"))) inline void cuemu_copy(void* to, const void* from, size_t bytes) {
    std::memcpy(to, from, bytes);        // checked once, as one access, by cuemu_vector_access
}
#define CUEMU_VECTOR(T, N, ...)                                                                  \
    struct __align__(N) T {                                                                      \
        float __VA_ARGS__;                                                                       \
        T() = default;                                                                           \
        T(const T& o) { cuemu_vector_access(&o, N, 0); cuemu_copy(this, &o, N); }               \
        T& operator=(const T& o) { cuemu_vector_access(this, N, 1); cuemu_copy(this, &o, N); return *this; } \
    };
CUEMU_VECTOR(float4, 16, x, y, z, w)
CUEMU_VECTOR(float2, 8, x, y)
#undef CUEMU_VECTOR
#endif

// --- the runtime's C interface (runtime.cpp): launches, memory, reports in cuemu_api.h; the rest here
#include "cuemu_api.h"
extern "C" {
// the current CUDA thread's coordinates: constant within a thread (so `const` is exact)
__attribute__((const)) uint3 cuemu_thread_idx();
__attribute__((const)) uint3 cuemu_block_idx();
__attribute__((const)) dim3 cuemu_block_dim();
__attribute__((const)) dim3 cuemu_grid_dim();
// a barrier's or shuffle's site is its source file and line: threads meet only at the same one
void cuemu_syncthreads_at(const char* file, int line);
void cuemu_cluster_sync_at(const char* file, int line);
__attribute__((const)) unsigned cuemu_cluster_ctarank();
void* cuemu_map_shared_at(const void* local, unsigned rank, const char* file, int line);
uint64_t cuemu_shfl_at(int kind, unsigned mask, uint64_t bits, int lane_arg, int width, const char* file, int line);
extern char __start_cuemu_shared[] __attribute__((weak, visibility("hidden")));
extern char __stop_cuemu_shared[] __attribute__((weak, visibility("hidden")));
}

#define threadIdx (cuemu_thread_idx())
#define blockIdx (cuemu_block_idx())
#define blockDim (cuemu_block_dim())
#define gridDim (cuemu_grid_dim())
#define warpSize 32

namespace cuemu {
// Barriers are calls into the runtime named by their source line (code addresses would not do:
// the compiler duplicates a call on several paths); the fences around them keep the compiler
// from caching __shared__ values across them (it would otherwise treat the statics as private).
__attribute__((always_inline)) inline void fence() { __asm__ __volatile__("" ::: "memory"); }
#define CUEMU_FENCE() cuemu::fence()

enum Shuffle { IDX = 0, UP = 1, DOWN = 2, XOR = 3 };
template <class T>
inline T shuffle(int kind, unsigned mask, T v, int lane_arg, int width, const char* file, int line) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "shuffles move 4- or 8-byte values");
    uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof v);
    bits = cuemu_shfl_at(kind, mask, bits, lane_arg, width, file, line);
    std::memcpy(&v, &bits, sizeof v);
    return v;
}

template <class... A, size_t... I>
__attribute__((no_sanitize("thread"))) inline void call(const void* kernel, void** args, std::index_sequence<I...>) {
    reinterpret_cast<void (*)(A...)>(const_cast<void*>(kernel))(*static_cast<A*>(args[I])...);
}

// the thunk of every kernel of signature void(A...); it reads the packed arguments, which live in
// host memory, so it is not instrumented
template <class... A>
__attribute__((no_sanitize("thread"), noinline)) void thunk(const void* kernel, void** args) {
    call<A...>(kernel, args, std::index_sequence_for<A...>{});
}

template <class... A>
constexpr cuemu_thunk thunk_of(void (*)(A...)) { return &thunk<A...>; }

// a kernel's signature as one letter per parameter (pycuda's struct codes): P pointer, i int,
// I unsigned, f float, d double, q long long, Q unsigned long long, ? anything else
template <class T>
constexpr char code() {
    if constexpr (std::is_pointer_v<T>) return 'P';
    else if constexpr (std::is_same_v<T, int>) return 'i';
    else if constexpr (std::is_same_v<T, unsigned>) return 'I';
    else if constexpr (std::is_same_v<T, float>) return 'f';
    else if constexpr (std::is_same_v<T, double>) return 'd';
    else if constexpr (std::is_integral_v<T> && sizeof(T) == 8) return std::is_signed_v<T> ? 'q' : 'Q';
    else return '?';
}
template <class... A>
struct Codes { static constexpr char text[] = {code<A>()..., '\0'}; };
template <class... A>
constexpr const char* codes_of(void (*)(A...)) { return Codes<A...>::text; }

template <class... A>
cuemu_launch_desc describe(void (*kernel)(A...), dim3 grid, dim3 block, void** args) {
    return {reinterpret_cast<const void*>(kernel), &thunk<A...>, args, {grid.x, grid.y, grid.z},
            {block.x, block.y, block.z}, __start_cuemu_shared, __stop_cuemu_shared, 0, 0, 0};
}

template <class... A>
int launch_packed(void (*kernel)(A...), dim3 grid, dim3 block, void** args) {
    cuemu_launch_desc d = describe(kernel, grid, block, args);
    return cuemu_launch(&d);
}

template <class... A>
const char* refusal(void (*kernel)(A...), dim3 grid, dim3 block) {
    cuemu_launch_desc d = describe(kernel, grid, block, nullptr);
    return cuemu_launch_refusal(&d);
}

template <class... A, class... B>
int launch(void (*kernel)(A...), dim3 grid, dim3 block, B&&... given) {
    static_assert(sizeof...(A) == sizeof...(B), "cuemu::launch: wrong number of kernel arguments");
    std::tuple<std::decay_t<A>...> values(static_cast<std::decay_t<A>>(given)...);
    return std::apply([&](auto&... v) {
        void* args[] = {static_cast<void*>(&v)..., nullptr};
        return launch_packed(kernel, grid, block, args);
    }, values);
}
}  // namespace cuemu

#define __syncthreads() (CUEMU_FENCE(), cuemu_syncthreads_at(__FILE__, __LINE__), CUEMU_FENCE())
#define cuemu_cluster_sync() (CUEMU_FENCE(), cuemu_cluster_sync_at(__FILE__, __LINE__), CUEMU_FENCE())
#define cuemu_map_shared(local, rank) \
    (CUEMU_FENCE(), static_cast<decltype(local)>(cuemu_map_shared_at((local), (rank), __FILE__, __LINE__)))

// shuffles take their caller's line through __builtin_FILE/__builtin_LINE default arguments
#define CUEMU_AT const char* file = __builtin_FILE(), int line = __builtin_LINE()
template <class T> inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, CUEMU_AT) {
    return cuemu::shuffle(cuemu::IDX, mask, v, src, width, file, line);
}
template <class T> inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32, CUEMU_AT) {
    return cuemu::shuffle(cuemu::UP, mask, v, int(delta), width, file, line);
}
template <class T> inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32, CUEMU_AT) {
    return cuemu::shuffle(cuemu::DOWN, mask, v, int(delta), width, file, line);
}
template <class T> inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32, CUEMU_AT) {
    return cuemu::shuffle(cuemu::XOR, mask, v, lane_mask, width, file, line);
}
#undef CUEMU_AT

// --- device functions the kernels use
template <class T> inline T __ldg(const T* p) { return *p; }
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
#define CUEMU_MINMAX(T) \
    inline T min(T a, T b) { return a < b ? a : b; } \
    inline T max(T a, T b) { return a < b ? b : a; }
CUEMU_MINMAX(int)
CUEMU_MINMAX(unsigned)
CUEMU_MINMAX(long long)
CUEMU_MINMAX(unsigned long long)
CUEMU_MINMAX(float)
CUEMU_MINMAX(double)
#undef CUEMU_MINMAX

#if defined(CUEMU_CUDA_RUNTIME) && defined(CUEMU_LAUNCH_NOW)
// cudaLaunchKernel(kernel, ...) on a kernel function runs it here, at once (more specialised than the
// template of cuda_runtime.h, which would pass it on to libcudart as `const void*`)
template <class... A>
inline cudaError_t cudaLaunchKernel(void (*kernel)(A...), dim3 grid, dim3 block, void** args,
                                    size_t shared_bytes = 0, cudaStream_t = 0) {
    if (shared_bytes != 0) return cudaErrorInvalidValue;     // dynamic shared memory: not emulated
    return cuemu::launch_packed(kernel, grid, block, args) == 0 ? cudaSuccess : cudaErrorLaunchFailure;
}
#endif
