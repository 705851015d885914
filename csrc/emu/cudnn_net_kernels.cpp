// csrc/cudnn_net.cu compiled by g++ for the reference build; its one kernel, xent_grad, is registered
// so that the reference cudaLaunchKernel runs it on the CPU.
#include <cuda_runtime.h>

#include "kernel_interim.h"
// Found through the include path: csrc/, or ahead of it a test's edited copy (a planted bug).
#include "cudnn_net.cu"

namespace {
const lenet::emu::interim::Registration xent_grad(&lenet::xent_grad, "xent_grad");
}
