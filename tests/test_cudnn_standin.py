"""The stand-in CUDA runtime, cuDNN and cuBLAS (tests/cudnn_standin, docs/cudnn-standin.md): each documented rule
it enforces is tripped by a wrong call here, made through ctypes on the built module; bugs planted in a
copy of csrc/cudnn_net.cu fail with a message naming the call and the rule (in its kernel, xent_grad, the
report of the CPU emulator of CUDA semantics, naming the line); nothing leaks; the list of deprecated cuDNN
calls cudnn_net.cu uses is pinned. All executed on the CPU (marker `emu`)."""
from __future__ import annotations

import ctypes
import gc
import re
import subprocess
from ctypes import POINTER, byref, c_char_p, c_float, c_int, c_size_t, c_void_p

import numpy as np
import pytest

import lenet
from lenet.backends import cudnn
from lenet.check import spread
from agree import assert_logits_agree
from lenet.emu import modules

import cudnn_standin
from conftest import standin_build

pytestmark = pytest.mark.emu

BAD_PARAM, NOT_SUPPORTED = 2000, 3000             # cudnnStatus_t (cuDNN 9)
CUBLAS_INVALID_VALUE = 7                          # cublasStatus_t
CAPTURE_UNSUPPORTED, CAPTURE_INVALIDATED = 900, 901   # cudaError_t
INVALID_RESOURCE_HANDLE = 400
CUBLAS_OP_N, CUBLAS_OP_T = 0, 1
FWD_GEMM, FWD_FFT = 2, 4                          # cudnnConvolutionFwdAlgo_t


CSRC = cudnn_standin.CSRC


@pytest.fixture(scope="module")
def built():
    return standin_build()


@pytest.fixture(scope="module")
def native(standin_native):
    return standin_native


class StandIn:
    """The stand-in's C API through ctypes, with small helpers to make valid objects."""

    def __init__(self, path):
        self.lib = lib = cudnn_standin.library(path)
        for name in ("cudnnGetErrorString", "cudaGetErrorString", "cublasGetStatusString"):
            getattr(lib, name).restype = c_char_p
        lib.cudaMalloc.argtypes = [POINTER(c_void_p), c_size_t]
        lib.cudaMallocHost.argtypes = [POINTER(c_void_p), c_size_t]
        lib.cudaMemcpyAsync.argtypes = [c_void_p, c_void_p, c_size_t, c_int, c_void_p]
        lib.cudnnConvolutionForward.argtypes = [c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                                                c_int, c_void_p, c_size_t, c_void_p, c_void_p, c_void_p]
        lib.cudnnGetConvolutionForwardWorkspaceSize.argtypes = [c_void_p] * 5 + [c_int, POINTER(c_size_t)]
        lib.cublasSgemm_v2.argtypes = [c_void_p, c_int, c_int, c_int, c_int, c_int, c_void_p, c_void_p, c_int,
                                       c_void_p, c_int, c_void_p, c_void_p, c_int]
        lib.cublasSetWorkspace_v2.argtypes = [c_void_p, c_void_p, c_size_t]
        self.one, self.zero = c_float(1.0), c_float(0.0)
        self.cudnn = self.out("cudnnCreate")

    def out(self, create, *args):
        handle = c_void_p()
        assert getattr(self.lib, create)(byref(handle), *args) == 0, create
        return handle

    def cudnn_message(self, status):
        return self.lib.cudnnGetErrorString(status).decode()

    def cuda_message(self, status):
        return self.lib.cudaGetErrorString(status).decode()

    def tensor(self, n, c, h, w):
        d = self.out("cudnnCreateTensorDescriptor")
        assert self.lib.cudnnSetTensor4dDescriptor(d, 0, 0, n, c, h, w) == 0   # NCHW, float
        return d

    def filter(self, k, c, h, w):
        d = self.out("cudnnCreateFilterDescriptor")
        assert self.lib.cudnnSetFilter4dDescriptor(d, 0, 0, k, c, h, w) == 0
        return d

    def conv(self):
        d = self.out("cudnnCreateConvolutionDescriptor")
        assert self.lib.cudnnSetConvolution2dDescriptor(d, 0, 0, 1, 1, 1, 1, 1, 0) == 0   # cross-correlation
        return d

    def malloc(self, count, fill=None):
        """count floats of device memory, poisoned, or filled with `fill`."""
        p = c_void_p()
        assert self.lib.cudaMalloc(byref(p), count * 4) == 0
        if fill is not None:
            self.upload(p, np.full(count, fill, np.float32))
        return p

    def upload(self, p, values: np.ndarray):
        """values into device memory, by a copy (so it counts as written) on the legacy stream."""
        values = np.ascontiguousarray(values, np.float32)
        assert self.lib.cudaMemcpyAsync(p, values.ctypes.data, values.nbytes, 1, None) == 0 and self.sync() == 0

    @staticmethod
    def write(p, values: np.ndarray):
        """values into host memory (pinned staging)."""
        values = np.ascontiguousarray(values, np.float32)
        ctypes.memmove(p, values.ctypes.data, values.nbytes)

    def read(self, p, count):
        return np.ctypeslib.as_array(ctypes.cast(p, POINTER(c_float)), (count,)).copy()

    def sync(self, stream=None):
        return self.lib.cudaStreamSynchronize(stream)

    def conv_call(self, x_shape=(1, 1, 28, 28), y_shape=(1, 20, 24, 24), w_shape=(20, 1, 5, 5), *, alpha=None,
                  beta=None, x=None, y=None, algo=FWD_GEMM, ws_bytes=None, ws=None):
        """One cudnnConvolutionForward with these arguments (valid ones where not given)."""
        xd, yd, wd, cd = self.tensor(*x_shape), self.tensor(*y_shape), self.filter(*w_shape), self.conv()
        x = x or self.malloc(int(np.prod(x_shape)), 1.0)
        y = y or self.malloc(int(np.prod(y_shape)))
        w = self.malloc(int(np.prod(w_shape)), 0.5)
        need = c_size_t()
        self.lib.cudnnGetConvolutionForwardWorkspaceSize(self.cudnn, xd, wd, cd, yd, FWD_GEMM, byref(need))
        ws_bytes = need.value if ws_bytes is None else ws_bytes
        ws = ws or self.malloc(max(need.value, 1) // 4 + 1)
        alpha = byref(self.one) if alpha is None else alpha
        beta = byref(self.zero) if beta is None else beta
        return self.lib.cudnnConvolutionForward(self.cudnn, alpha, xd, x, wd, w, cd, algo, ws, ws_bytes, beta, yd, y)


@pytest.fixture(scope="module")
def api(built, native):
    return StandIn(built)


def refused(message, *patterns):
    return all(re.search(p, message) for p in patterns)


# --- cuDNN: descriptors, shapes, pointers, scaling, in-place, algorithms, workspace --------------------

def test_a_valid_call_succeeds_and_computes(api):
    y = api.malloc(20 * 24 * 24)
    assert api.conv_call(y=y) == 0 and api.sync() == 0
    np.testing.assert_allclose(api.read(y, 20 * 24 * 24), 25 * 0.5)   # ones ⋆ 0.5 over 5x5


def test_descriptor_format_and_dims(api):
    d = api.out("cudnnCreateTensorDescriptor")
    assert api.lib.cudnnSetTensor4dDescriptor(d, 1, 0, 1, 1, 28, 28) == NOT_SUPPORTED     # NHWC
    assert "NCHW" in api.cudnn_message(NOT_SUPPORTED)
    assert api.lib.cudnnSetTensor4dDescriptor(d, 0, 0, 1, -1, 28, 28) == BAD_PARAM
    assert refused(api.cudnn_message(BAD_PARAM), "cudnnSetTensor4dDescriptor", "negative")


def test_conv_output_size_by_the_documented_formula(api):
    assert api.conv_call(y_shape=(1, 20, 25, 24)) == BAD_PARAM
    assert refused(api.cudnn_message(BAD_PARAM), r"cudnnConvolutionForward: yDesc \(1, 20, 25, 24\) is not the "
                   r"convolution output \(1, 20, 24, 24\)")


def test_channel_agreement_of_x_and_w(api):
    assert api.conv_call(x_shape=(1, 2, 28, 28)) == BAD_PARAM
    assert refused(api.cudnn_message(BAD_PARAM), "2 channels but wDesc has 1 input feature maps")


def test_pointers_must_be_live_allocations_large_enough(api):
    assert api.conv_call(y=api.malloc(20 * 24 * 24 - 1)) == BAD_PARAM
    assert refused(api.cudnn_message(BAD_PARAM), r"y \(1, 20, 24, 24\) needs 46080 bytes at offset 0 of an allocation "
                   "of 46076 bytes")
    freed = api.malloc(1 << 18, 1.0)            # 1 MB: mapped and unmapped whole, so never handed out again below
    assert api.lib.cudaFree(freed) == 0
    assert api.conv_call(x=freed) == BAD_PARAM
    assert "not inside a live device allocation" in api.cudnn_message(BAD_PARAM)


def test_alpha_and_beta_are_host_pointers(api):
    assert api.conv_call(alpha=api.malloc(1, 1.0)) == BAD_PARAM
    assert "alpha points to device memory" in api.cudnn_message(BAD_PARAM)
    assert api.conv_call(beta=c_void_p()) == BAD_PARAM
    assert "beta is NULL" in api.cudnn_message(BAD_PARAM)


def test_beta_zero_never_reads_the_poisoned_output(api):
    """cudaMalloc'd memory is poisoned (a NaN pattern): beta = 0 writes it without reading it; beta = 1
    reads it, and the stand-in reports the read of memory nothing wrote."""
    y = api.malloc(20 * 24 * 24)
    assert np.isnan(api.read(y, 1))[0]
    assert api.conv_call(y=y) == 0 and api.sync() == 0
    assert np.isfinite(api.read(y, 20 * 24 * 24)).all()
    assert api.conv_call(beta=byref(api.one)) == 0          # valid as a call; it fails when it runs
    status = api.sync()
    assert status != 0 and refused(api.cuda_message(status), r"cudnnConvolutionForward \(queued\): y \(read because "
                                   r"beta != 0.*\) element 0 is read before anything wrote it")


def test_in_place_only_where_documented(api):
    xd = api.tensor(1, 20, 24, 24)
    x = api.malloc(20 * 24 * 24, 1.0)
    act = api.out("cudnnCreateActivationDescriptor")
    assert api.lib.cudnnSetActivationDescriptor(act, 1, 0, ctypes.c_double(0.0)) == 0   # ReLU
    one, zero = byref(api.one), byref(api.zero)
    assert api.lib.cudnnActivationForward(api.cudnn, act, one, xd, x, zero, xd, x) == 0   # documented in place
    pool = api.out("cudnnCreatePoolingDescriptor")
    assert api.lib.cudnnSetPooling2dDescriptor(pool, 0, 0, 2, 2, 0, 0, 2, 2) == 0
    yd = api.tensor(1, 20, 12, 12)
    assert api.lib.cudnnPoolingForward(api.cudnn, pool, one, xd, x, zero, yd, x) == BAD_PARAM
    assert refused(api.cudnn_message(BAD_PARAM), "cudnnPoolingForward: y overlaps x: in-place operation is documented")
    assert api.sync() == 0


def test_algorithm_enum_and_support(api):
    assert api.conv_call(algo=99) == BAD_PARAM
    assert "algo 99: invalid enumerant" in api.cudnn_message(BAD_PARAM)
    assert api.conv_call(algo=FWD_FFT) == NOT_SUPPORTED


def test_workspace_at_least_what_get_workspace_size_returned(api):
    need = 4 * 25 * 24 * 24                                  # GEMM: one image's im2col matrix
    assert api.conv_call(ws_bytes=need - 1) == BAD_PARAM
    assert refused(api.cudnn_message(BAD_PARAM), f"workSpaceSizeInBytes {need - 1} is less than the {need} bytes "
                   "cudnnGetConvolutionForwardWorkspaceSize returns for algo 2")
    assert api.conv_call(ws=api.malloc(need // 4 - 1)) == BAD_PARAM   # a workspace one float short
    assert refused(api.cudnn_message(BAD_PARAM), f"workSpace of workSpaceSizeInBytes needs {need} bytes")


def test_find_returns_awkward_lists_and_pick_copes(native, params):
    """Tensor-op entries first, failed and non-deterministic ones ahead: the net still picks FP32
    FMA algorithms, deterministic ones when asked (ranked by cudnnGet*_v7, which times nothing: timing
    noise must not make two deterministic nets choose differently)."""
    x = lenet.data.embedded().train_x[:8]
    y = np.arange(8, dtype=np.int32)
    picked = {}
    for deterministic in (True, False):
        net = cudnn.CudnnNet(params, "plain", deterministic, native=native)
        net.train_step(x, y, 0.05)
        picked[deterministic] = net.describe()
    assert "forward algo 2/2" in picked[True] and "forward algo 2/2" in picked[False]   # GEMM, after a tensor-op and a failed entry
    assert "backward data algo 1, conv1/conv2 backward filter algo 1/1" in picked[True]   # deterministic ALGO_1
    assert "backward data algo 0, conv1/conv2 backward filter algo 0/0" in picked[False]  # the faster ALGO_0


def test_pooling_backward_needs_the_forward_output_as_y(api):
    one, zero = byref(api.one), byref(api.zero)
    pool = api.out("cudnnCreatePoolingDescriptor")
    assert api.lib.cudnnSetPooling2dDescriptor(pool, 0, 0, 2, 2, 0, 0, 2, 2) == 0
    xd, yd = api.tensor(1, 1, 4, 4), api.tensor(1, 1, 2, 2)
    x, y = api.malloc(16, 1.0), api.malloc(4, 1.0)
    dy, dx = api.malloc(4, 3.0), api.malloc(16)
    assert api.lib.cudnnPoolingBackward(api.cudnn, pool, one, yd, y, yd, dy, xd, x, zero, xd, dx) == 0
    assert api.sync() == 0 and api.read(dx, 16).sum() == 12.0                  # each gradient to one maximum
    assert api.lib.cudnnPoolingBackward(api.cudnn, pool, one, yd, dy, yd, y, xd, x, zero, xd, dx) == 0   # y, dy swapped
    status = api.sync()
    assert refused(api.cuda_message(status), "cudnnPoolingBackward", "y must be cudnnPoolingForward", "swapped")


# --- CUDA runtime: capture rules, graph replay, events -----------------------------------------------

def test_an_allocation_larger_than_the_device_is_refused(api):
    """cudaErrorMemoryAllocation (2), as a real cudaMalloc of more than the device has: a size that
    wrapped below zero (a planted `ws_bytes - 1` with no workspace) must not crash the emulator."""
    p = c_void_p()
    status = api.lib.cudaMalloc(byref(p), c_size_t(2**64 - 1))
    assert status == 2 and not p.value and refused(api.cuda_message(status), "cudaMalloc", "bytes asked", "free")


@pytest.fixture
def no_collection():
    """No garbage collection while a test captures: an earlier test's net, freed by the collector
    inside the capture, would call cudaFree there, which invalidates the capture (a full run failed
    once with an invalidated capture here)."""
    gc.collect()
    gc.disable()
    yield
    gc.enable()


def test_capture_forbids_allocation_and_synchronize(api, no_collection):
    s = api.out("cudaStreamCreateWithFlags", 1)
    for forbidden, message in [(lambda: api.lib.cudaMalloc(byref(c_void_p()), 64), "cudaMalloc: allocates memory"),
                               (lambda: api.sync(s), "cudaStreamSynchronize: the stream is capturing")]:
        assert api.lib.cudaStreamBeginCapture(s, 1) == 0                        # thread-local mode
        status = forbidden()
        assert status == CAPTURE_UNSUPPORTED and message in api.cuda_message(status)
        graph = c_void_p(1)
        assert api.lib.cudaStreamEndCapture(s, byref(graph)) == CAPTURE_INVALIDATED and not graph.value
    assert api.lib.cudaStreamBeginCapture(None, 1) == CAPTURE_UNSUPPORTED     # never the legacy stream
    assert api.lib.cudaStreamDestroy(s) == 0


def test_graph_replay_rereads_pinned_staging(api, no_collection):
    s = api.out("cudaStreamCreateWithFlags", 1)
    host = api.out("cudaMallocHost", c_size_t(16))
    dev = api.malloc(4)
    assert api.lib.cudaStreamBeginCapture(s, 1) == 0
    assert api.lib.cudaMemcpyAsync(dev, host, 16, 1, s) == 0                   # host to device, recorded
    graph, exec_ = c_void_p(), c_void_p()
    assert api.lib.cudaStreamEndCapture(s, byref(graph)) == 0
    assert api.lib.cudaGraphInstantiate(byref(exec_), graph, ctypes.c_ulonglong(0)) == 0
    for value in (1.0, 2.0):
        api.write(host, np.full(4, value))
        assert api.lib.cudaGraphLaunch(exec_, s) == 0 and api.sync(s) == 0
        np.testing.assert_array_equal(api.read(dev, 4), value)
    for destroy, h in (("cudaGraphExecDestroy", exec_), ("cudaGraphDestroy", graph), ("cudaFreeHost", host),
                       ("cudaStreamDestroy", s)):
        assert getattr(api.lib, destroy)(h) == 0


def test_elapsed_time_needs_recorded_events(api):
    a, b = api.out("cudaEventCreateWithFlags", 0), api.out("cudaEventCreateWithFlags", 0)
    assert api.lib.cudaEventElapsedTime(byref(c_float()), a, b) == INVALID_RESOURCE_HANDLE
    assert "cudaEventRecord() has not been called" in api.cuda_message(INVALID_RESOURCE_HANDLE)


# --- cuBLAS: xerbla rules, aliasing, workspace ---------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    ((CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 2, 3, 2, 4), r"lda = 3 < max\(1, m \(transa = N\) = 4\)"),
    ((CUBLAS_OP_T, CUBLAS_OP_N, 4, 3, 2, 1, 2, 4), r"lda = 1 < max\(1, k \(transa = T\) = 2\)"),
    ((CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 2, 4, 1, 4), r"ldb = 1 < max\(1, k \(transb = N\) = 2\)"),
    ((CUBLAS_OP_N, CUBLAS_OP_T, 4, 3, 2, 4, 2, 4), r"ldb = 2 < max\(1, n \(transb = T\) = 3\)"),
    ((CUBLAS_OP_N, CUBLAS_OP_N, 4, 3, 2, 4, 2, 3), r"ldc = 3 < max\(1, m = 4\)"),
    ((CUBLAS_OP_N, CUBLAS_OP_N, -1, 3, 2, 4, 2, 4), "m, n, k must not be negative"),
    ((7, CUBLAS_OP_N, 4, 3, 2, 4, 2, 4), "transa: not CUBLAS_OP_N"),
])
def test_sgemm_xerbla_rules(api, args, message):
    blas = api.out("cublasCreate_v2")
    ta, tb, m, n, k, lda, ldb, ldc = args
    a, b, c = api.malloc(64, 1.0), api.malloc(64, 1.0), api.malloc(64)
    one, zero = byref(api.one), byref(api.zero)
    assert api.lib.cublasSgemm_v2(blas, ta, tb, m, n, k, one, a, lda, b, ldb, zero, c, ldc) == CUBLAS_INVALID_VALUE
    assert refused(api.lib.cublasGetStatusString(CUBLAS_INVALID_VALUE).decode(), "cublasSgemm: " + message)
    assert api.lib.cublasDestroy_v2(blas) == 0


def test_sgemm_computes_column_major_and_refuses_aliasing(api):
    blas = api.out("cublasCreate_v2")
    a, b = np.arange(6, dtype=np.float32), np.arange(6, dtype=np.float32) + 1   # A 2x3, B 3x2, column-major
    da, db, dc = api.malloc(6), api.malloc(6), api.malloc(4)
    api.upload(da, a)
    api.upload(db, b)
    one, zero = byref(api.one), byref(api.zero)
    assert api.lib.cublasSgemm_v2(blas, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, one, da, 2, db, 3, zero, dc, 2) == 0
    assert api.sync() == 0
    want = a.reshape(3, 2).T @ b.reshape(2, 3).T                            # column-major reading
    np.testing.assert_array_equal(api.read(dc, 4).reshape(2, 2).T, want)
    assert api.lib.cublasSgemm_v2(blas, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, one, da, 2, db, 3, zero, da, 2) != 0
    assert "C overlaps A or B" in api.lib.cublasGetStatusString(CUBLAS_INVALID_VALUE).decode()
    assert api.lib.cublasSetWorkspace_v2(blas, ctypes.c_void_p(db.value + 4), 16) == CUBLAS_INVALID_VALUE
    assert "aligned to 256 bytes" in api.lib.cublasGetStatusString(CUBLAS_INVALID_VALUE).decode()
    assert api.lib.cublasDestroy_v2(blas) == 0


# --- the ledger: every handle and descriptor destroyed exactly once ------------------------------------

def test_destroying_twice_is_refused_and_recorded(api, native):
    d = api.out("cudnnCreateTensorDescriptor")
    assert api.lib.cudnnDestroyTensorDescriptor(d) == 0
    assert api.lib.cudnnDestroyTensorDescriptor(d) == BAD_PARAM
    assert "cudnnDestroyTensorDescriptor: tensor descriptor destroyed twice" in native.misuses()[-1]


def test_a_net_frees_everything_it_made(native, params):
    before = native.live_objects()
    misuses = len(native.misuses())
    x = lenet.data.embedded().test_x
    net = cudnn.CudnnNet(params, "graph", native=native)
    for n in (1, 7, 2, 3, 4, 5):                                  # batch 1's graph, then evictions
        net.predict(x[spread(n, len(x))])
    net.train_step(x[:8], np.arange(8, dtype=np.int32), 0.05)
    assert any(native.live_objects()[k] > before.get(k, 0) for k in ("graph exec", "tensor descriptor"))
    del net
    gc.collect()
    after = native.live_objects()
    assert {k: v for k, v in after.items() if v != before.get(k, 0)} == {}
    assert len(native.misuses()) == misuses


# --- bugs planted in a copy of cudnn_net.cu -------------------------------------------------------------

def exercise(module, params):
    """What the planted bugs must not survive: batch 1 on the graph path, batch 7, a training step."""
    data = lenet.data.embedded()
    net = cudnn.CudnnNet(params, "graph", native=module)
    for n in (1, 7):
        x = data.test_x[spread(n, len(data.test_x))]
        assert_logits_agree(net.predict(x), params, x)
    net.train_step(data.train_x[:8], data.train_y[:8].astype(np.int32), 0.05)
    net.parameters()


def line_of(text):
    """The line number of the one line of csrc/cudnn_net.cu that contains `text`."""
    lines = [i for i, line in enumerate((CSRC / "cudnn_net.cu").read_text().splitlines(), 1) if text in line]
    assert len(lines) == 1, (text, lines)
    return lines[0]


TREE_SUM = line_of("part[threadIdx.x] += part[threadIdx.x + s]")      # xent_grad's tree reduction
EMULATOR = r"cudaLaunchKernel \(queued\): xent_grad: reported by the CPU emulator of CUDA semantics:\n  "

PLANTED = [
    pytest.param("P.f1.get(), HID));\n    LENET_CHECK(cudnnAddTensor", "P.f1.get(), OUT));\n    LENET_CHECK(cudnnAddTensor",
                 r"cublasSgemm\(.*\) failed: CUBLAS_STATUS_INVALID_VALUE \(stand-in: cublasSgemm: ldc = 10 < max\(1, "
                 r"m = 500\)\)", id="wrong ldc"),
    pytest.param("p[F1].get(), FLAT, P.p2.get(), FLAT", "p[F1].get(), HID, P.p2.get(), FLAT",
                 r"cublasSgemm\(.*\) failed: .*lda = 500 < max\(1, k \(transa = T\) = 800\)", id="wrong lda"),
    pytest.param("p[F2].get(), HID, P.f1.get(), HID", "P.f1.get(), HID, p[F2].get(), HID",
                 r"cublasSgemm\(.*\) failed: .*A \(500 x 10, lda 500\) needs 20000 bytes at offset 0 of an allocation "
                 r"of 2000 bytes", id="GEMM operands swapped"),
    pytest.param("conv.get(), P.fwd1,\n                                        P.ws.get(), P.ws_bytes, &ZERO",
                 "conv.get(), P.fwd1,\n                                        P.ws.get(), P.ws_bytes, &ONE",
                 r"cudaStreamSynchronize\(.*\) failed: .*cudnnConvolutionForward \(queued\): y \(read because beta "
                 r"!= 0", id="beta 1 where 0 belongs"),
    pytest.param("P.p2d.get(), P.p2.get(), P.p2d.get(), P.dp2.get()", "P.p2d.get(), P.dp2.get(), P.p2d.get(), P.p2.get()",
                 r"cudnnPoolingBackward \(queued\): y element \d+ = .* is not the maximum .* \(are y and dy swapped\?\)",
                 id="pooling y and dy swapped"),
    pytest.param("device_array<char>(std::max<size_t>(P->ws_bytes, 256))", "device_array<char>(P->ws_bytes - 1)",
                 r"cudnnConvolutionForward\(.*\) failed: CUDNN_STATUS_BAD_PARAM \(stand-in: cudnnConvolutionForward: "
                 r"workSpace of workSpaceSizeInBytes needs 128000 bytes at offset 0 of an allocation of 127999 bytes\)",
                 id="workspace one byte short"),
    pytest.param("                forward_calls(P);\n                copy_out(P);\n            });",
                 "                forward_calls(P);\n                LENET_CHECK(cudaStreamSynchronize(s()));\n"
                 "                copy_out(P);\n            });",
                 r"cudaStreamSynchronize\(s\(\)\) failed: cudaErrorStreamCaptureUnsupported \(stand-in: "
                 r"cudaStreamSynchronize: the stream is capturing", id="synchronize inside capture"),
    pytest.param("&neg_lr, P.c2d.get(), P.dc2.get(), &ONE, b2d.get()", "&neg_lr, P.c2d.get(), P.dc2.get(), &ONE, fb1d.get()",
                 r"cudnnConvolutionBackwardBias\(.*\) failed: .*db \(1, 500, 1, 1\) needs 2000 bytes at offset 0 of an "
                 r"allocation of 200 bytes", id="bias gradient with the wrong descriptor"),
    # the host reads the loss before the stream's copy of it ran: the emulator names the read's line
    pytest.param("    LENET_CHECK(cudaStreamSynchronize(s()));   // the one host wait of a step: the loss\n", "",
                 r"\w+\(.*\) failed: cudaErrorIllegalState \(stand-in: \w+: reported by the CPU emulator of CUDA semantics "
                 r"since the last call:\n  sync: host read of pinned memory 0x[0-9a-f]+ \+ 0 \(of 4 bytes\) at "
                 rf"cudnn_net\.cu:{line_of('return *P.h_loss.get();') - 1} .*before the stream's work on it finished",
                 id="no synchronise before the loss is read"),
    # the kernel, on the emulator: its report names the line
    pytest.param("        __syncthreads();\n    }\n    if (threadIdx.x == 0) *loss", "    }\n    if (threadIdx.x == 0) *loss",
                 EMULATOR + rf"race: write of shared part \+ \d+ at cudnn_net\.cu:{TREE_SUM} \(.*xent_grad\) .* races "
                 rf"with the read at cudnn_net\.cu:{TREE_SUM}", id="xent_grad: __syncthreads removed from the tree sum"),
    pytest.param("if (threadIdx.x < s) part", "if (threadIdx.x <= s) part",
                 EMULATOR + rf"out-of-bounds: 8-byte load from shared memory 0 bytes past the end of shared part "
                 rf"\(2048 bytes\).* at cudnn_net\.cu:{TREE_SUM} \(.*xent_grad\) by block \(0,0,0\) "
                 r"thread \(128,0,0\)", id="xent_grad: tree sum off by one"),
    pytest.param("const float* logp = P.logp.get();", "const float* logp = P.dlo.get();",   # dlogits: 320 bytes at batch 8
                 EMULATOR + r"uninitialised: read of device buffer 0x[0-9a-f]+ \+ 0 \(of 320 bytes\), never written, at "
                 rf"cudnn_net\.cu:{line_of('dlogits[i * OUT + k] = ')} \(.*xent_grad\)", id="xent_grad reads a buffer nothing wrote"),
]


@pytest.mark.parametrize("original, planted, message", PLANTED)
def test_a_planted_bug_fails_naming_the_call_and_rule(params, original, planted, message):
    source = (CSRC / "cudnn_net.cu").read_text()
    assert source.count(original) == 1, "the planted bug no longer matches cudnn_net.cu"
    module = cudnn_standin.load(standin_build(source.replace(original, planted)))   # a module of its own
    with pytest.raises(RuntimeError) as err:
        exercise(module, params)
    error = str(err.value)
    assert re.search(message, error), error
    assert re.search(r"cudnn_net\.cu:\d+$", error), error


def test_the_unplanted_source_passes_the_same_exercise(native, params):
    exercise(native, params)


# --- deprecations ------------------------------------------------------------------------------------------

DEPRECATED = (   # cuDNN 9 marks the legacy API deprecated (CUDNN_WARN_DEPRECATED); docs/cudnn-standin.md
    "CUDNN_NOT_PROPAGATE_NAN", "cudnnActivationBackward", "cudnnActivationDescriptor_t", "cudnnActivationForward",
    "cudnnAddTensor", "cudnnConvolutionBackwardBias", "cudnnConvolutionBackwardData", "cudnnConvolutionBackwardFilter",
    "cudnnConvolutionBwdDataAlgoPerf_t", "cudnnConvolutionBwdFilterAlgoPerf_t", "cudnnConvolutionDescriptor_t",
    "cudnnConvolutionForward", "cudnnConvolutionFwdAlgoPerf_t", "cudnnCreateActivationDescriptor",
    "cudnnCreateConvolutionDescriptor", "cudnnCreateFilterDescriptor", "cudnnCreatePoolingDescriptor",
    "cudnnDestroyActivationDescriptor", "cudnnDestroyConvolutionDescriptor", "cudnnDestroyFilterDescriptor",
    "cudnnDestroyPoolingDescriptor", "cudnnFilterDescriptor_t", "cudnnFindConvolutionBackwardDataAlgorithm",
    "cudnnFindConvolutionBackwardFilterAlgorithm", "cudnnFindConvolutionForwardAlgorithm",
    "cudnnGetConvolutionBackwardDataAlgorithm_v7", "cudnnGetConvolutionBackwardFilterAlgorithm_v7",
    "cudnnGetConvolutionForwardAlgorithm_v7", "cudnnGetConvolutionBackwardDataWorkspaceSize", "cudnnGetConvolutionBackwardFilterWorkspaceSize",
    "cudnnGetConvolutionForwardWorkspaceSize", "cudnnPoolingBackward", "cudnnPoolingDescriptor_t",
    "cudnnPoolingForward", "cudnnSetActivationDescriptor", "cudnnSetConvolution2dDescriptor",
    "cudnnSetConvolutionMathType", "cudnnSetFilter4dDescriptor", "cudnnSetPooling2dDescriptor",
)


def test_the_deprecated_cudnn_calls_in_use():
    """A change in this list (a call migrated, or a new one deprecated by a cuDNN update) is seen here."""
    includes = cudnn_standin.include_dirs()
    if isinstance(includes, str):
        pytest.skip(f"cuDNN stand-in build: {includes}")
    result = subprocess.run(["g++", *modules.KERNEL_FLAGS, *modules.compile_flags((), cudnn_standin.EMU), "-DCUEMU_CUDA_RUNTIME",
                             "-fsyntax-only", "-DCUDNN_WARN_DEPRECATED", *(f"-I{d}" for d in includes), "-x", "c++",
                             str(CSRC / "cudnn_net.cu")], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    names = re.findall(r"['‘](?:[\w:]+ )?(\w+)(?:\(.*?\))?['’] is deprecated", result.stderr)
    assert tuple(sorted(set(names))) == tuple(sorted(DEPRECATED)), sorted(set(names))
