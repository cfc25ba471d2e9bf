"""The native backends (ONNX Runtime, PyTorch, OpenVINO, TensorFlow) as the tests see them: how each
writes the same models in its own format, and the client helpers every backend's tests share.

Every backend writes an ``add_sub`` (two FP32 [4] inputs, their sum and difference, batching up to
8 with dynamic batching), the same ``add_sub`` with no config.pbtxt where the backend completes
one from the model, and a corrupt model file that must leave only itself UNAVAILABLE. The shared
behaviour is tested once over all of them (tests/e2e/test_e2e_native_backends.py); each backend's
own file (test_e2e_onnx.py, _pytorch, _openvino, _tensorflow) keeps what only it does.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

#: every conformance add_sub's config after its backend's lines: batching, dynamic batching
_BATCHING = "max_batch_size: 8\ndynamic_batching { max_queue_delay_microseconds: 20000 }\n"


def io_config(kind: str, specs: list[tuple[str, str, str]]) -> str:
    """``input [ ... ]`` / ``output [ ... ]`` of config.pbtxt for (name, TYPE_..., "[ dims ]")."""
    items = ", ".join(f'{{ name: "{n}" data_type: {t} dims: {d} }}' for n, t, d in specs)
    return f"{kind} [ {items} ]\n"


def version_folder(repo: Path, name: str, config: str | None = None) -> Path:
    """``repo/name/1`` made, with ``config`` as config.pbtxt (None: none, auto-complete)."""
    (repo / name / "1").mkdir(parents=True)
    if config is not None:
        (repo / name / "config.pbtxt").write_text(config)
    return repo / name / "1"


# -- the models, per backend ----------------------------------------------------------------------------
def onnx_graph(
    nodes: list[Any], inputs: list[Any], outputs: list[Any], inits: list[Any] | None = None
) -> Any:
    """An ONNX model of one graph (opset 17, IR 8: what ONNX Runtime and OpenVINO both read)."""
    from onnx import helper

    model = helper.make_model(
        helper.make_graph(nodes, "g", inputs, outputs, inits or []),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    model.ir_version = 8
    return model


def onnx_add_sub() -> Any:
    """The add_sub graph: A, B [N, 4] FP32 -> SUM, DIFF."""
    from onnx import TensorProto, helper

    f = TensorProto.FLOAT
    dims: list[str | int | None] = ["N", 4]  # N: the batch
    return onnx_graph(
        [helper.make_node("Add", ["A", "B"], ["SUM"]), helper.make_node("Sub", ["A", "B"], ["DIFF"])],
        [helper.make_tensor_value_info(n, f, dims) for n in ("A", "B")],
        [helper.make_tensor_value_info(n, f, dims) for n in ("SUM", "DIFF")],
    )


def _write_onnx(folder: Path) -> None:
    import onnx

    onnx.save(onnx_add_sub(), str(folder / "model.onnx"))


def _write_openvino(folder: Path) -> None:
    import onnx
    import openvino as ov

    onnx.save(onnx_add_sub(), str(folder / "tmp.onnx"))
    ov.save_model(ov.convert_model(str(folder / "tmp.onnx")), str(folder / "model.xml"))
    (folder / "tmp.onnx").unlink()


def _write_pytorch(folder: Path) -> None:
    import torch

    class AddSub(torch.nn.Module):  # positional: INPUT__0, INPUT__1 -> OUTPUT__0, OUTPUT__1
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return a + b, a - b

    torch.jit.save(torch.jit.script(AddSub()), str(folder / "model.pt"))


def _write_tensorflow(folder: Path) -> None:
    import tensorflow as tf

    def add_sub(A: Any, B: Any) -> Any:
        return {"SUM": A + B, "DIFF": A - B}

    spec = tf.TensorSpec([None, 4], tf.float32)
    module = tf.Module()  # (a function held by a module: what tf.saved_model.save tracks)
    module.add_sub = tf.function(add_sub, input_signature=[spec, spec])
    tf.saved_model.save(
        module, str(folder / "model.savedmodel"), signatures={"serving_default": module.add_sub}
    )


def _corrupt_onnx(folder: Path) -> None:
    (folder / "model.onnx").write_bytes(b"not an ONNX protobuf" * 4)


def _corrupt_openvino(folder: Path) -> None:
    (folder / "model.xml").write_text("<net><layers>truncated")
    (folder / "model.bin").write_bytes(b"")


def _corrupt_pytorch(folder: Path) -> None:
    (folder / "model.pt").write_bytes(b"PK\x03\x04 not really a TorchScript archive")


def _corrupt_tensorflow(folder: Path) -> None:
    (folder / "model.savedmodel").mkdir()
    (folder / "model.savedmodel" / "saved_model.pb").write_bytes(b"not a SavedModel protobuf" * 8)


@dataclass(frozen=True)
class NativeBackend:
    """One native backend as the conformance suite drives it."""

    #: the backend's name (config.pbtxt ``backend``) and the test ids
    name: str
    #: the Python package it needs here (its tests skip without it)
    package: str
    #: its model names' prefix: ``<prefix>_add_sub``, ``<prefix>_auto``, ``<prefix>_corrupt``
    prefix: str
    #: config.pbtxt's first line (``backend: ...`` or ``platform: ...``)
    config_head: str
    #: what the config reads back: (platform, default_model_filename); the metadata's platform is
    #: the backend's name where the config has none (as the reference)
    platform: str
    model_file: str
    #: the add_sub's input and output names (PyTorch's positional convention: INPUT__0 ...)
    inputs: tuple[str, str]
    outputs: tuple[str, str]
    write: Callable[[Path], None]
    corrupt: Callable[[Path], None]
    #: what the corrupt model's reason says (and it names the file)
    corrupt_reason: tuple[str, ...]
    #: whether a model with no config.pbtxt is completed from the model file
    auto_completes: bool = True

    @property
    def available(self) -> bool:
        return importlib.util.find_spec(self.package) is not None

    @property
    def metadata_platform(self) -> str:
        return self.platform or self.name

    def model(self, what: str) -> str:
        return f"{self.prefix}_{what}"

    def add_sub_config(self) -> str:
        (a, b), (s, d) = self.inputs, self.outputs
        config = f"{self.config_head}\n{_BATCHING}"
        config += io_config("input", [(a, "TYPE_FP32", "[ 4 ]"), (b, "TYPE_FP32", "[ 4 ]")])
        return config + io_config("output", [(s, "TYPE_FP32", "[ 4 ]"), (d, "TYPE_FP32", "[ 4 ]")])

    def write_models(self, repo: Path) -> None:
        """``<prefix>_add_sub`` (with its config), ``<prefix>_auto`` (none, where the backend
        completes one) and ``<prefix>_corrupt`` into ``repo``."""
        self.write(version_folder(repo, self.model("add_sub"), self.add_sub_config()))
        if self.auto_completes:
            self.write(version_folder(repo, self.model("auto")))
        self.corrupt(version_folder(repo, self.model("corrupt"), self.add_sub_config()))


BACKENDS = (
    NativeBackend(
        name="onnxruntime",
        package="onnxruntime",
        prefix="onnx",
        config_head='platform: "onnxruntime_onnx"',
        platform="onnxruntime_onnx",
        model_file="model.onnx",
        inputs=("A", "B"),
        outputs=("SUM", "DIFF"),
        write=_write_onnx,
        corrupt=_corrupt_onnx,
        corrupt_reason=("The file is not a loadable ONNX model", "export it again"),
    ),
    NativeBackend(
        name="pytorch",
        package="torch",
        prefix="torch",
        config_head='platform: "pytorch_libtorch"',
        platform="pytorch_libtorch",
        model_file="model.pt",
        inputs=("INPUT__0", "INPUT__1"),
        outputs=("OUTPUT__0", "OUTPUT__1"),
        write=_write_pytorch,
        corrupt=_corrupt_pytorch,
        corrupt_reason=("is not a loadable TorchScript module", "torch.jit.save"),
        auto_completes=False,
    ),
    NativeBackend(
        name="openvino",
        package="openvino",
        prefix="ov",
        config_head='backend: "openvino"',
        platform="",
        model_file="model.xml",
        inputs=("A", "B"),
        outputs=("SUM", "DIFF"),
        write=_write_openvino,
        corrupt=_corrupt_openvino,
        corrupt_reason=("is not a loadable OpenVINO IR", "openvino.save_model"),
    ),
    NativeBackend(
        name="tensorflow",
        package="tensorflow",
        prefix="tf",
        config_head='platform: "tensorflow_savedmodel"',
        platform="tensorflow_savedmodel",
        model_file="model.savedmodel",
        inputs=("A", "B"),
        outputs=("SUM", "DIFF"),
        write=_write_tensorflow,
        corrupt=_corrupt_tensorflow,
        corrupt_reason=("is not a loadable SavedModel",),
    ),
)


def backend_params(only: Callable[[NativeBackend], bool] = lambda b: True) -> list[Any]:
    """``BACKENDS`` as pytest parameters (id: the backend's name), each skipped without its package."""
    return [
        pytest.param(
            b, id=b.name, marks=pytest.mark.skipif(not b.available, reason=f"{b.package} is not installed")
        )
        for b in BACKENDS
        if only(b)
    ]


# -- the clients' inputs ---------------------------------------------------------------------------------
def http_input(name: str, arr: np.ndarray[Any, Any], datatype: str | None = None) -> Any:
    """tritonclient.http's input for ``arr`` (binary), its datatype from the array unless given."""
    import tritonclient.http as httpclient

    t = httpclient.InferInput(name, list(arr.shape), datatype or httpclient.np_to_triton_dtype(arr.dtype))
    t.set_data_from_numpy(arr, binary_data=True)
    return t


def grpc_input(name: str, arr: np.ndarray[Any, Any], datatype: str | None = None) -> Any:
    """tritonclient.grpc's input for ``arr``, its datatype from the array unless given."""
    import tritonclient.grpc as grpcclient

    t = grpcclient.InferInput(name, list(arr.shape), datatype or grpcclient.np_to_triton_dtype(arr.dtype))
    t.set_data_from_numpy(arr)
    return t
