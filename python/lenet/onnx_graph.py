"""LeNet as an ONNX model, built node by node with the onnx package (what `python -m lenet.export`
writes and the onnxruntime backend runs).

The graph is lenet.model's network in ONNX operators: Conv -> MaxPool -> Conv -> MaxPool ->
Flatten -> Gemm -> Relu -> Gemm, the canonical tensors as initializers under their canonical
names (ONNX's layouts are the canonical ones: NCHW, OIHW, Gemm with transB=1 takes [out, in]),
input `images` (N, 1, 28, 28) float32 with a symbolic batch N, output `logits` (N, 10).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from . import weights
from ._files import atomic_write, check_writable
from .errors import UnavailableError
from .model import FILTER_SIZE, IMAGE_SHAPE, NUM_CLASSES, PARAM_NAMES, POOL

OPSET = 17          # every operator here is unchanged since opset 13; 17 loads in onnxruntime >= 1.13
IR_VERSION = 8      # the IR version of opset 17 (onnx >= 1.16 would write a newer one by default)
INPUT, OUTPUT, BATCH = "images", "logits", "N"
INSTALL = "onnx not installed (pip install '.[onnx]')"


def import_onnx():
    if importlib.util.find_spec("onnx") is None:
        raise UnavailableError(INSTALL)
    import onnx
    return onnx


def build(params: dict, metadata: dict | None = None, version: str = ""):
    """The checked in-memory onnx.ModelProto of LeNet with `params` (canonical names and layouts);
    `metadata` (the weights file's provenance) goes into metadata_props as weights.<key>,
    `version` (lenet's, given by the command line) into producer_version."""
    onnx = import_onnx()
    from onnx import TensorProto, helper, numpy_helper

    params = weights.check_params(params)
    conv = {"kernel_shape": [FILTER_SIZE, FILTER_SIZE], "strides": [1, 1], "pads": [0, 0, 0, 0]}
    pool = {"kernel_shape": [POOL, POOL], "strides": [POOL, POOL]}
    nodes = [
        helper.make_node("Conv", [INPUT, "conv1.weight", "conv1.bias"], ["conv1"], "conv1", **conv),   # N,20,24,24
        helper.make_node("MaxPool", ["conv1"], ["pool1"], "pool1", **pool),                           # N,20,12,12
        helper.make_node("Conv", ["pool1", "conv2.weight", "conv2.bias"], ["conv2"], "conv2", **conv),  # N,50,8,8
        helper.make_node("MaxPool", ["conv2"], ["pool2"], "pool2", **pool),                           # N,50,4,4
        helper.make_node("Flatten", ["pool2"], ["flatten"], "flatten", axis=1),                       # N,800 (c,h,w)
        helper.make_node("Gemm", ["flatten", "fc1.weight", "fc1.bias"], ["fc1"], "fc1", transB=1),    # N,500
        helper.make_node("Relu", ["fc1"], ["relu"], "relu"),
        helper.make_node("Gemm", ["relu", "fc2.weight", "fc2.bias"], [OUTPUT], "fc2", transB=1),      # N,10
    ]
    graph = helper.make_graph(
        nodes, "lenet",
        inputs=[helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, [BATCH, *IMAGE_SHAPE])],
        outputs=[helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, [BATCH, NUM_CLASSES])],
        initializer=[numpy_helper.from_array(params[n], n) for n in PARAM_NAMES],
        doc_string="Caffe LeNet: images (N,1,28,28) float32 in [0, 1] -> logits (N,10)")
    model = helper.make_model(graph, producer_name="lenet", producer_version=version,
                              opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    helper.set_model_props(model, {f"weights.{k}": str(v) for k, v in (metadata or {}).items()})
    onnx.checker.check_model(model, full_check=True)      # also infers every shape, strictly
    return model


def save(path, params: dict, metadata: dict | None = None, version: str = "") -> Path:
    """Build the model and write it atomically: a failed export leaves an existing file as it was."""
    path = check_writable(path)
    return atomic_write(path, build(params, metadata, version).SerializeToString())

