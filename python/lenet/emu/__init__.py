"""A CPU emulator of CUDA semantics for the project's own CUDA C kernels: correctness only,
never timed. `python -m lenet.emu` runs every kernel version through the real launch sequences
and checks it against the NumPy reference; docs/emulator.md says what it is and is not.

  build.py     compile sources into a cached shared object (content-hashed, atomic)
  cuemu.h      the prelude g++ gets with -include; the C++ launch API (its header comment)
  runtime.cpp  launches, scheduling, clusters, memory, reports
  sync.cpp     __syncthreads, cluster barriers, shuffles, DSMEM mapping
  fiber.cpp    one fiber per CUDA thread          shadow.cpp  every load and store checked
  runtime.py   the runtime loaded, its reports as file:line
  modules.py   a .cu file compiled unchanged into a kernel module; one launch
  launcher.py  EmuGPU: the cupy/pycuda Launcher interface on the emulator
  divergence.py  first divergence: each launch against its NumPy model, one at a time
  reference.py   the cuDNN/cuBLAS reference build of csrc/ on the runtime
"""
