"""A model's files against its config: the model file is there, and the framework's view of it
(an ONNX graph's inputs and outputs, an OpenVINO model's ports, a SavedModel's signature) agrees
with the config, by the checks the backends make at load.

ONNX graphs are read with the ``onnx`` package (the graph only: no session, no weights read), and
handed to the ONNX Runtime backend's own check (``backends/onnxruntime/graph.py``); without
``onnx``, ONNX Runtime's session reads it. OpenVINO and TensorFlow models are read by their
backend (``signature``) when the framework is installed, and skipped with a note when not.
A backend's check stops at the first tensor; :func:`collect` runs it again without that tensor
until it passes, so every tensor that disagrees is reported.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import logging
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from inferd.backends.signature import GraphTensor, complete_config
from inferd.core.tensor import TensorSpec
from inferd.errors import InferdError, InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

__all__ = ["collect", "complete_onnx", "onnx_signature", "signature_check"]

log = logging.getLogger("inferd.check")

#: (inputs, outputs, overridable initializers) of a model, as its backend reads them
Signature = tuple[list[GraphTensor], list[GraphTensor], list[GraphTensor]]
#: runs a backend's load-time check of a config against a signature; raises at the first tensor
Check = Callable[["ModelConfig", Signature, Sequence[TensorSpec], Sequence[TensorSpec]], None]

_QUOTED = re.compile(r"(?<!\w)'([^']+)'")  # not the apostrophe of "graph's"
_FRAMEWORKS = {"openvino": "openvino", "tensorflow": "tensorflow"}


# -- ONNX, read with the onnx package ----------------------------------------------------------------


def _elem_name(onnx: Any, elem_type: int) -> str:
    return str(onnx.TensorProto.DataType.Name(elem_type)).lower()


def _type_name(onnx: Any, tp: Any) -> str:
    """ONNX Runtime's name of a value type: ``tensor(float)``, ``seq(map(int64,tensor(float)))``."""
    which = tp.WhichOneof("value")
    if which == "tensor_type":
        return f"tensor({_elem_name(onnx, tp.tensor_type.elem_type)})"
    if which == "sequence_type":
        return f"seq({_type_name(onnx, tp.sequence_type.elem_type)})"
    if which == "map_type":
        key = _elem_name(onnx, tp.map_type.key_type)
        return f"map({key},{_type_name(onnx, tp.map_type.value_type)})"
    if which == "optional_type":
        return f"optional({_type_name(onnx, tp.optional_type.elem_type)})"
    return str(which)


def _node_arg(onnx: Any, value: Any) -> SimpleNamespace:
    """A graph value as ONNX Runtime's ``NodeArg`` shows it (name, type, shape: ints, names of
    symbolic dims, None for unknown ones)."""
    tp = value.type
    shape: list[int | str | None] | None = None
    if tp.WhichOneof("value") == "tensor_type" and tp.tensor_type.HasField("shape"):
        shape = []
        for dim in tp.tensor_type.shape.dim:
            kind = dim.WhichOneof("value")
            shape.append(dim.dim_value if kind == "dim_value" else dim.dim_param if kind else None)
    return SimpleNamespace(name=value.name, type=_type_name(onnx, tp), shape=shape)


class _OnnxGraph:
    """What ``graph_signature`` reads of an ONNX Runtime session, read from the graph itself."""

    def __init__(self, onnx: Any, model: Any) -> None:
        graph = model.graph
        initialized = {t.name for t in graph.initializer}
        overridable = model.ir_version >= 4  # before IR 4 every initializer had to be an input
        self._inputs = [_node_arg(onnx, v) for v in graph.input if v.name not in initialized]
        self._initializers = [
            _node_arg(onnx, v) for v in graph.input if v.name in initialized and overridable
        ]
        self._outputs = [_node_arg(onnx, v) for v in graph.output]

    def get_inputs(self) -> list[SimpleNamespace]:
        return self._inputs

    def get_outputs(self) -> list[SimpleNamespace]:
        return self._outputs

    def get_overridable_initializers(self) -> list[SimpleNamespace]:
        return self._initializers


def onnx_signature(config: ModelConfig, version_dir: Path) -> Signature:
    """The graph's inputs, outputs and overridable initializers, without a session where the
    ``onnx`` package is installed. UnavailableError (no file) or InvalidArgumentError (unreadable)."""
    from inferd.backends.onnxruntime.graph import graph_signature

    if importlib.util.find_spec("onnx") is None:
        from inferd.backends.registry import get_backend

        inputs, outputs = get_backend("onnxruntime").signature(config, version_dir)  # type: ignore[attr-defined]
        return list(inputs), list(outputs), []
    from inferd.backends.onnxruntime.backend import model_path

    path = model_path(config, version_dir)
    onnx = importlib.import_module("onnx")
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # a DecodeError, or anything else a damaged file makes onnx raise
        raise InvalidArgumentError(f"failed to load '{path}': {type(e).__name__}: {e}") from e
    return graph_signature(_OnnxGraph(onnx, model))


def complete_onnx(config: ModelConfig, version_dir: Path | None, default_max_batch_size: int) -> None:
    """The ONNX Runtime backend's auto-complete (``NativeBackend.auto_complete``) on the graph read
    by :func:`onnx_signature`."""
    if len(config.input) + len(config.batch_input) > 0 and len(config.output) > 0:
        return
    if version_dir is None:
        return
    inputs, outputs, _ = onnx_signature(config, version_dir)
    complete_config(config, inputs, outputs, default_max_batch_size, log=log)


# -- the checks ----------------------------------------------------------------------------------------


def _onnx_check(
    config: ModelConfig, sig: Signature, seq_in: Sequence[TensorSpec], seq_out: Sequence[TensorSpec]
) -> None:
    from inferd.backends.onnxruntime.graph import check_config_against_graph

    check_config_against_graph(config, sig[0], sig[1], sig[2], seq_in, seq_out)


def _openvino_check(config: ModelConfig, sig: Signature, *_: Sequence[TensorSpec]) -> None:
    from inferd.backends.openvino.signature import check_config_against_model

    check_config_against_model(config, sig[0], sig[1])


def _tensorflow_check(config: ModelConfig, sig: Signature, *_: Sequence[TensorSpec]) -> None:
    from inferd.backends.tensorflow.settings import tf_settings
    from inferd.backends.tensorflow.signature import check_config_against_signature

    check_config_against_signature(config, sig[0], sig[1], tf_settings(config).signature_def)


def _backend_signature(backend: str) -> Callable[[Any, Path], Signature]:
    def read(config: ModelConfig, version_dir: Path) -> Signature:
        from inferd.backends.registry import get_backend

        inputs, outputs = get_backend(backend).signature(config, version_dir)  # type: ignore[attr-defined]
        return list(inputs), list(outputs), []

    return read


def signature_check(backend: str) -> tuple[Callable[[Any, Path], Signature], Check] | str | None:
    """How to read a ``backend`` model's signature and check a config against it; a note when the
    framework is not installed; None when the backend has no such check (python, pytorch)."""
    if backend == "onnxruntime":
        return onnx_signature, _onnx_check
    module = _FRAMEWORKS.get(backend)
    if module is None:
        return None
    if importlib.util.find_spec(module) is None:
        return f"not checked against the model file: {module} is not installed"
    check: Check = _openvino_check if backend == "openvino" else _tensorflow_check
    return _backend_signature(backend), check


def _named(message: str, names: set[str], model: str) -> list[str]:
    """The tensor names a check's message is about (not those it lists as the alternatives)."""
    head = re.split(r", which lists|, whose \w+ are:", message, maxsplit=1)[0]
    head = head.replace(f"model '{model}'", "")
    return [n for n in _QUOTED.findall(head) if n in names]


def collect(
    config: ModelConfig,
    sig: Signature,
    check: Check,
    seq: tuple[list[TensorSpec], list[TensorSpec]],
    skip: set[str],
    report: Callable[[str, str | None], None],
) -> None:
    """Run ``check`` until it passes, reporting each failure (``report(message, tensor name)``) and
    taking the tensor it names out of both the config and the signature before the next run.

    ``skip``: tensors left out from the start (their config entry already failed validation)."""
    work = copy.deepcopy(config)
    inputs, outputs, inits = (list(part) for part in sig)
    seq_in, seq_out = list(seq[0]), list(seq[1])

    def drop(names: set[str]) -> None:
        for field in (work.input, work.output):
            for i in reversed(range(len(field))):
                if field[i].name in names:
                    del field[i]
        for tensors in (inputs, outputs, inits):
            tensors[:] = [t for t in tensors if t.name not in names]
        for specs in (seq_in, seq_out):
            specs[:] = [s for s in specs if s.name not in names]

    drop(skip)
    for _ in range(len(inputs) + len(outputs) + len(work.input) + len(work.output) + len(seq_in) + 2):
        try:
            check(work, (inputs, outputs, inits), seq_in, seq_out)
            return
        except InferdError as e:
            names = {t.name for t in (*inputs, *outputs, *inits)} | {s.name for s in (*seq_in, *seq_out)}
            names |= {t.name for t in work.input} | {t.name for t in work.output}
            named = _named(e.message, names, str(config.name))
            report(e.message, named[0] if named else None)
            if not named:
                return
            drop(set(named))
