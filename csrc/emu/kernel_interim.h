// INTERIM, until the project's CUDA emulator (python/lenet/emu) is merged: the CUDA C keywords the one
// kernel of cudnn_net.cu uses, for g++, and a block runner with one std::thread per CUDA thread and
// __syncthreads as a std::barrier. It executes the kernel's semantics; it checks nothing (no race,
// bounds or barrier checks: the emulator's job). Include after cuda_runtime.h.
#pragma once
#include <cuda_runtime.h>

#include <barrier>
#include <cstddef>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "reference.h"

namespace lenet::emu::interim {
inline thread_local dim3 thread_index;
inline dim3 block_dim, grid_dim;
inline std::barrier<>* block_barrier = nullptr;

template <class Body>
void run_grid(dim3 grid, dim3 block, Body body) {   // blocks one after another (only one block is used)
    grid_dim = grid;
    block_dim = block;
    const unsigned threads = block.x * block.y * block.z;
    for (unsigned b = 0; b < grid.x * grid.y * grid.z; ++b) {
        std::barrier<> bar(threads);
        block_barrier = &bar;
        std::vector<std::thread> team;
        for (unsigned t = 0; t < threads; ++t)
            team.emplace_back([&, t] {
                thread_index = dim3(t % block.x, t / block.x % block.y, t / (block.x * block.y));
                body();
            });
        for (std::thread& th : team) th.join();
    }
}

template <class... A, size_t... I>
Work bind_arguments(void (*f)(A...), void** args, dim3 grid, dim3 block, std::index_sequence<I...>) {
    std::tuple<std::decay_t<A>...> values{*static_cast<std::decay_t<A>*>(args[I])...};   // copied at launch
    return [f, values, grid, block] { run_grid(grid, block, [&] { std::apply(f, values); }); };
}

// Registers kernel f so that cudaLaunchKernel(f, ...) runs it.
struct Registration {
    template <class... A>
    Registration(void (*f)(A...), const char* name) {
        register_kernel(reinterpret_cast<const void*>(f), name, [f](void** args, dim3 grid, dim3 block, size_t) {
            return bind_arguments(f, args, grid, block, std::index_sequence_for<A...>{});
        });
    }
};
}  // namespace lenet::emu::interim

#undef __global__
#define __global__
#undef __shared__
#define __shared__ static
#define threadIdx (::lenet::emu::interim::thread_index)
#define blockDim (::lenet::emu::interim::block_dim)
inline void __syncthreads() { ::lenet::emu::interim::block_barrier->arrive_and_wait(); }
