"""A CPU emulator of CUDA semantics for the project's own CUDA C kernels: correctness only,
never timed. `python -m lenet.emu` runs every kernel version through the real launch sequences
and checks it against the NumPy reference; docs/emulator.md says what it is and is not.

  __main__.py  python -m lenet.emu: every kernel version's forward and SGD step, verdict and counts
  build.py     compile sources into a cached shared object (content-hashed, atomic)
  cuemu.h      the prelude g++ gets with -include; the C++ launch API (its header comment)
  cuemu_api.h  the runtime's C interface: launches, device memory, reports
  runtime.h    the runtime's internal state, shared by its .cpp files
  runtime.cpp  launches, scheduling, clusters, memory, reports
  sync.cpp     __syncthreads, cluster barriers, shuffles, DSMEM mapping
  fiber.cpp    one fiber per CUDA thread          shadow.cpp  every load and store checked
  symbols.cpp  a code address as file:line (function)
  runtime.py   the runtime loaded, its reports as file:line
  modules.py   a .cu file compiled unchanged into a kernel module; one launch
  launcher.py  EmuGPU: the cupy/pycuda Launcher interface on the emulator
  divergence.py  first divergence: each launch against its NumPy model, one at a time
"""
