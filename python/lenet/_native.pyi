"""Type stub of lenet._native, the native layer (csrc/, pybind11). Every array argument is
checked (dtype, C-contiguity, shape, finiteness) before use; a bad one raises ValueError."""
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, NoReturn

import numpy as np
import numpy.typing as npt

__version__: str
WITH_CUDA: bool            # built with the cuDNN/cuBLAS path
CUDA_WHY: str              # why not ("" when WITH_CUDA)

def cuda_device_count() -> int: ...   # CUDA devices visible (0 when built without CUDA)
def blas_config() -> str: ...         # the OpenBLAS build the CPU path uses

# --- cblas (CPU) ---

class CpuNet:
    """LeNet on the CPU: direct vectorised convolutions, OpenBLAS sgemm, forward, backward and SGD
    (csrc/cblas_net.h). One call at a time per net; the GIL is released while it computes. Usable in
    the child of fork() (its helper threads are started anew there)."""

    def __init__(self, params: Mapping[str, npt.NDArray[np.float32]], threads: int = 0,
                 isa: str = "auto", split: str = "auto", balance: bool = True) -> None:
        """params: the eight canonical tensors, float32, C-contiguous, exact shapes (copied).
        threads: compute threads, the calling one included (0: OpenBLAS's default count,
        OPENBLAS_NUM_THREADS or the cores; 1: the calling thread only). With more than one, the
        work is split over the calling thread and threads - 1 persistent helper threads (which
        spin 200 us after each piece of work, then sleep); a single image over two. isa: the forward kernels, "auto" (the best this CPU has), "avx512",
        "avx2" or "generic"; ValueError if this CPU lacks it. split: how a single image is cut
        over the two threads, "channels", "rows" (avx512 only; the same bits) or "auto": whichever
        of the two its recent images took less time in, each tried in turn (avx512; else channels).
        balance: the cuts move to whichever thread runs faster (see cuts); False: they stay where set."""
    @property
    def threads(self) -> int: ...
    @property
    def isa(self) -> str: ...                   # the forward kernels in use: avx512, avx2 or generic
    @property
    def cuts(self) -> list[int]:
        """Where a single image's work is cut between its two threads now: the calling thread's
        conv1 and conv2 output channels and fc1 rows (of 20, 50 and 500; split by rows only fc1's
        applies). With balance, every 8th image each thread counts the time it computed each group,
        and after 8 such images a cut moves by one block toward the faster thread where that ends
        the slower one's part over 3 % sooner. The logits have the same bits wherever the cuts lie."""
    @cuts.setter
    def cuts(self, cuts: Sequence[int]) -> None:
        """ValueError unless each is a whole number of its kernel's channel block (conv1: 5 with
        avx512, 2 with avx2, 10 generic; conv2: 5) or of 50 fc1 rows, leaving both threads some."""
    def predict(self, images: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """(N, 1, 28, 28) float32 images -> (N, 10) float32 logits."""
    def train_step(self, images: npt.NDArray[np.float32], labels: npt.NDArray[np.int32], lr: float) -> float:
        """One SGD step on the mean softmax cross-entropy; labels (N,) int32 in [0, 10); returns the loss."""
    def parameters(self) -> dict[str, npt.NDArray[np.float32]]:
        """{name: float32 array}, canonical layouts (copies)."""
    def layer_times(self, images: npt.NDArray[np.float32],
                    repeats: int) -> tuple[dict[str, list[float]], list[float], list[bool]]:
        """(1, 1, 28, 28) float32, repeats in [1, 1e6] -> ({group: [µs per repeat]}, [µs], [bool]): the
        wall time of each fused group of layers of a single-image forward ("conv1+pool1",
        "conv2+pool2", "fc1+fc2"), in forward order; for each forward whose second half a helper
        thread took, how long after the forward began it started (none with one thread); and for
        each forward whether it was split by rows."""

def predictor(net: CpuNet, bad_images: Callable[[object, str], NoReturn]) -> Callable[[object], npt.NDArray[np.float32]]:
    """net.predict as a function (it keeps net alive) that, where net.predict raises ValueError for
    the images, calls bad_images(images, message) to raise the caller's error instead."""

# --- cudnn (GPU) ---

CUDNN_VERSION: int         # cuDNN the module was built against, e.g. 92800 (CUDA builds only)

def cudnn_version() -> int: ...                 # cuDNN loaded at run time
def cuda_mem_info() -> tuple[int, int]: ...     # (free, total) device bytes (cudaMemGetInfo)

class CudnnNet:
    """LeNet on the GPU: cuDNN + cuBLAS forward, backward and SGD on one stream (csrc/cudnn_net.cu).
    CUDA, cuDNN and cuBLAS failures raise RuntimeError naming the call, file and line."""

    def __init__(self, params: Mapping[str, npt.NDArray[np.float32]], graph: bool = True,
                 deterministic: bool = True) -> None:
        """Uploads the eight canonical tensors once. graph: batch-1 inference replays a CUDA graph;
        deterministic: training uses deterministic cuDNN algorithms only."""
    def upload(self, images: npt.NDArray[np.float32]) -> int:
        """Stage (N, 1, 28, 28) float32 images (pinned copy; plain path: H2D started); returns N."""
    def forward(self, n: int) -> int:
        """Enqueue the forward pass of the staged batch of n images; returns n."""
    def download(self, n: int) -> npt.NDArray[np.float32]:
        """Wait for the forward pass; (n, 10) float32 logits."""
    def synchronize(self) -> None: ...
    def train_step(self, images: npt.NDArray[np.float32], labels: npt.NDArray[np.int32], lr: float) -> float:
        """One SGD step on the mean softmax cross-entropy, on the device; returns the loss."""
    def parameters(self) -> dict[str, npt.NDArray[np.float32]]:
        """{name: float32 array}, canonical layouts (copied from the device)."""
    def device_times_us(self, images: npt.NDArray[np.float32], repeats: int) -> dict[str, list[float]]:
        """CUDA-event times (us), copies excluded, `repeats` of each: {"forward": the calls as forward
        enqueues them, "kernels": a copy-free CUDA graph of the same calls, replayed}."""
    def layer_times_us(self, images: npt.NDArray[np.float32], repeats: int) -> dict[str, list[float]]:
        """(1, 1, 28, 28) float32, repeats -> {layer: [us per repeat]}: CUDA-event times of each
        layer's calls, the forward at batch 1 enqueued call by call."""
    def describe(self) -> str:
        """The cuDNN algorithms and workspace of each cached plan (batch size)."""
    @property
    def plans_made(self) -> int:
        """Plans made so far (each runs cudnnFind* and allocates); a cached batch size is not re-planned."""
    MAX_PLANS: ClassVar[int]   # batch sizes other than 1 whose plans are cached (least recently used evicted)
