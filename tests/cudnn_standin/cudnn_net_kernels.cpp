// csrc/cudnn_net.cu for the stand-in build, compiled as the CPU emulator of CUDA semantics compiles CUDA C
// (python/lenet/emu: the prelude cuemu.h, every load and store instrumented; built by __init__.py). Its one
// kernel, xent_grad, is registered so that the stand-in's cudaLaunchKernel queues it and, when the stream
// reaches it, launches it on the emulator: races, out-of-bounds accesses, barrier errors and reads of device
// memory nothing wrote fail it, each report naming cudnn_net.cu and the line.
#include <string>
#include <tuple>
#include <type_traits>

#include "standin.h"
// csrc/cudnn_net.cu through the include path, or a test's edited copy (a planted bug) written beside this file.
#include "cudnn_net.cu"

namespace lenet::emu {
namespace {

// The emulator's reports, one per line, and forget them (each failing launch shows its own).
std::string take_reports() {
    std::string text;
    for (size_t i = 0; i < cuemu_report_count(); ++i) {
        std::string report = cuemu_report_at(i);
        text += "\n  " + report.replace(report.find('|'), 1, ": ");
    }
    cuemu_clear_reports();
    return text;
}

template <class... A, size_t... I>
std::tuple<std::decay_t<A>...> copied(void** args, std::index_sequence<I...>) {
    return {*static_cast<std::decay_t<A>*>(args[I])...};
}

// The launch of kernel `f`: the arguments are copied now (as cudaLaunchKernel does), the kernel runs on
// the emulator when the queued work does, and every replay of a captured graph launches it again.
template <class... A>
Launch emulated(void (*f)(A...), const char* name) {
    return [f, name](void** args, dim3 grid, dim3 block, size_t shared) -> Work {
        require(shared == 0, cudaErrorInvalidValue, "dynamic shared memory is not emulated");
        const std::string refused = cuemu::refusal(f, grid, block);   // sm_90's limits, as the emulator checks them
        require(refused.empty(), cudaErrorInvalidConfiguration, refused);
        return [f, name, grid, block, values = copied<A...>(args, std::index_sequence_for<A...>{})] {
            const int made = std::apply([&](const auto&... v) { return cuemu::launch(f, grid, block, v...); }, values);
            if (made)
                refuse(cudaErrorLaunchFailure,
                       std::string(name) + ": reported by the CPU emulator of CUDA semantics:" + take_reports());
        };
    };
}

const bool registered = (register_kernel(reinterpret_cast<const void*>(&xent_grad), "xent_grad",
                                         emulated(&xent_grad, "xent_grad")),
                         true);

}  // namespace

void emulator_reports() {
    if (cuemu_report_count())
        refuse(cudaErrorIllegalState, "reported by the CPU emulator of CUDA semantics since the last call:" + take_reports());
}
}  // namespace lenet::emu
