"""The TensorFlow backend: a SavedModel (``model.savedmodel/``) served through one of its signatures.

Backend ``tensorflow``, platform ``tensorflow_savedmodel``. ``<version>/model.savedmodel`` (or
``default_model_filename``) is a directory written by ``tf.saved_model.save``. tensorflow is
imported when the first SavedModel loads, never at start: ``pip install 'inferd[tensorflow]'``.
GraphDef models (``tensorflow_graphdef``) are not served (TensorFlow 2 reads them only through
``tf.compat.v1``).

The signature ``serving_default`` (parameter ``TF_SIGNATURE_DEF`` names another) is the model:
config inputs and outputs are its keys, as in Triton. Auto-complete fills inputs, outputs,
max_batch_size and dynamic batching from it (``signature.py``); the signature is then checked
against the config at load, so a contradiction makes the model UNAVAILABLE with a reason naming the
tensor. The SavedModel is read once per model version and its signature shared by the instances
(a concrete function is safe to call from several threads; Triton's ``MAX_SESSION_SHARE_COUNT``
set to the instance count): each instance calls it in its worker thread, and TensorFlow releases
the GIL while it runs. The requests of one execute are stacked on the batch dimension, run once and
split back (``backends/batched.py``). TYPE_STRING is ``tf.string`` both ways. TensorFlow exceptions
become inferd errors where they enter (:func:`_load_error`, :func:`_run_error`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.batched import BatchedInstance
from inferd.backends.native import NativeBackend, NativeModel, import_lazily
from inferd.backends.signature import GraphTensor
from inferd.backends.tensorflow.settings import TfSettings, apply_threads, tf_settings
from inferd.backends.tensorflow.signature import check_config_against_signature, signature_tensors
from inferd.core.request import InferRequest
from inferd.core.tensor import Tensor, TensorSpec
from inferd.core.types import BYTES
from inferd.errors import (
    InferdError,
    InternalError,
    InvalidArgumentError,
    UnavailableError,
    UnsupportedError,
)

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

log = logging.getLogger("inferd.backends.tensorflow")

DEFAULT_FILENAME = "model.savedmodel"
_SAVED_MODEL_FILES = ("saved_model.pb", "saved_model.pbtxt")


def _tensorflow() -> Any:
    """tensorflow, imported on first use."""
    # TensorFlow's C++ INFO and WARNING lines (oneDNN, CPU features) would fill the server's log
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return import_lazily("tensorflow", "tensorflow", "tensorflow")


def model_path(config: ModelConfig, version_dir: Path) -> Path:
    """``<version>/<default_model_filename>``: a SavedModel directory holding ``saved_model.pb``."""
    name = config.default_model_filename or DEFAULT_FILENAME
    path = version_dir / name
    if config.platform == "tensorflow_graphdef":
        raise UnsupportedError(
            f"unable to load model '{config.name}': platform tensorflow_graphdef is not served by inferd's "
            "tensorflow backend; save the model as a SavedModel (tf.saved_model.save) in "
            f"'{version_dir / DEFAULT_FILENAME}' and use platform tensorflow_savedmodel"
        )
    if not path.is_dir():
        raise UnavailableError(
            f"unable to find '{path}' for model '{config.name}': the version folder must hold the "
            f"SavedModel as a directory named '{name}' (tf.saved_model.save(module, '{path}'))"
        )
    if not any((path / f).is_file() for f in _SAVED_MODEL_FILES):
        raise UnavailableError(
            f"unable to load model '{config.name}': '{path}' is not a SavedModel (it holds no saved_model.pb); "
            "write it with tf.saved_model.save, or copy the whole SavedModel directory (saved_model.pb and "
            "variables/)"
        )
    return path


def _first_line(e: Exception) -> str:
    """The line of a TensorFlow message that says what went wrong (not its preamble or node list)."""
    skip = ("Graph execution error", "Detected at node", "<stack traces unavailable>", "[[")
    lines = [ln.strip() for ln in str(getattr(e, "message", None) or e).splitlines() if ln.strip()]
    text = next((ln for ln in lines if not ln.startswith(skip)), type(e).__name__)
    return text.split(" [Op:", 1)[0]


def _load_error(e: Exception, path: Path, model: str, settings: TfSettings) -> InferdError:
    """A SavedModel read failure as the reason the model table shows."""
    text = _first_line(e)
    if isinstance(e, ValueError) and "tags" in text:
        return InvalidArgumentError(
            f"unable to load model '{model}': {text} (parameter TF_GRAPH_TAG is "
            f"'{settings.graph_tag}'): set it to one of the SavedModel's tags, or remove it"
        )
    return InvalidArgumentError(
        f"unable to load model '{model}': '{path}' is not a loadable SavedModel ({text}): save it again "
        "with tf.saved_model.save, or check that it was copied completely (saved_model.pb and variables/)"
    )


def _run_error(e: Exception, model: str) -> InferdError:
    """A TensorFlow exception raised by a run as the error the client gets."""
    text = f"tensorflow error running model '{model}': {_first_line(e)}"
    kind = type(e).__name__
    if kind in ("InvalidArgumentError", "OutOfRangeError") or isinstance(e, (TypeError, ValueError)):
        return InvalidArgumentError(text)
    if kind == "UnimplementedError":
        return UnsupportedError(text)
    if kind == "UnavailableError":
        return UnavailableError(text)
    return InternalError(text)


def load_signature(path: Path, settings: TfSettings, model: str) -> tuple[Any, Any]:
    """The loaded SavedModel (kept alive: it owns the variables) and the signature it serves."""
    tf = _tensorflow()
    apply_threads(tf, settings, model)
    tags = [settings.graph_tag] if settings.graph_tag else None
    try:
        loaded = tf.saved_model.load(str(path), tags=tags)
    except Exception as e:
        raise _load_error(e, path, model, settings) from e
    signatures = loaded.signatures
    fn = signatures.get(settings.signature_def)
    if fn is None:
        keys = ", ".join(sorted(signatures)) or "(none)"
        raise InvalidArgumentError(
            f"unable to load model '{model}': the SavedModel '{path}' has no signature "
            f"'{settings.signature_def}' (its signatures: {keys}): set parameter TF_SIGNATURE_DEF to one "
            "of them, or save the model with signatures={'serving_default': ...}"
        )
    return loaded, fn


# --------------------------------------------------------------------------------------------------
# The backend


class TensorFlowModel(NativeModel):
    """A loaded SavedModel version: reads it once, checks its signature, shares it among instances."""

    find = staticmethod(model_path)

    def import_framework(self) -> None:
        self.tf = _tensorflow()

    def __init__(self, ctx: LoadContext) -> None:
        self.settings = tf_settings(ctx.config)  # first: a bad parameter is reported before the path
        super().__init__(ctx)
        self.loaded, self.fn = load_signature(self.path, self.settings, self.name)
        inputs, outputs = signature_tensors(self.fn, self.name)
        check_config_against_signature(ctx.config, inputs, outputs, self.settings.signature_def)
        ranks = {t.name: len(t.dims) for t in (*inputs, *outputs)}
        #: config tensors whose signature tensor has rank 0 (served as dims [1] when not batching)
        self.scalars = frozenset(s.name for s in (*self.inputs, *self.outputs) if ranks.get(s.name) == 0)

    def device_for(self, spec: InstanceSpec) -> str:
        """The TensorFlow device of an instance: ``/CPU:0``, or ``/GPU:<id>`` for ``KIND_GPU``."""
        if spec.kind != "GPU":
            return "/CPU:0"
        if not self.tf.config.list_physical_devices("GPU"):
            raise UnavailableError(
                f"unable to load model '{self.name}': instance '{spec.name}' is KIND_GPU, but TensorFlow finds "
                "no GPU (tensorflow-cpu has none): use instance_group [ { kind: KIND_CPU } ]"
            )
        return f"/GPU:{spec.device_id}"

    def create_instance(self, spec: InstanceSpec) -> TensorFlowInstance:
        device = self.device_for(spec)
        log.info("model '%s' version %s: instance %s on %s", self.name, self.version_str, spec.name, device)
        return TensorFlowInstance(self, device, spec.name)

    def unload(self) -> None:
        self.fn = None
        self.loaded = None


class TensorFlowBackend(NativeBackend):
    """Backend ``tensorflow`` (platform ``tensorflow_savedmodel``)."""

    name = "tensorflow"
    model_type = TensorFlowModel

    def gpu_available(self) -> bool:
        """Whether TensorFlow is installed and finds a GPU (tensorflow-cpu never does)."""
        try:
            tf = _tensorflow()
        except UnavailableError:
            return False  # the load says what to install
        return bool(tf.config.list_physical_devices("GPU"))

    def signature(
        self, config: ModelConfig, version_dir: Path
    ) -> tuple[list[GraphTensor], list[GraphTensor]]:
        settings = tf_settings(config)
        _, fn = load_signature(model_path(config, version_dir), settings, config.name)
        return signature_tensors(fn, config.name)


class TensorFlowInstance(BatchedInstance):
    """Calls the model's signature on one device; ``execute`` runs in the instance's worker thread."""

    #: a signature call costs more than a thread hand-off (about 0.7 ms for a [1,4] add_sub here)
    inline_ok = False
    model: TensorFlowModel

    def __init__(self, model: TensorFlowModel, device: str, name: str) -> None:
        super().__init__(model, name)
        self.device = device
        self.tf = model.tf
        self.fn = model.fn
        self._scalars = model.scalars

    def _group_inputs(
        self, requests: list[InferRequest], wanted: list[frozenset[str]]
    ) -> tuple[list[str], dict[str, Any]]:
        names = [o for o in self._output_names if any(o in w for w in wanted)]
        return names, self._feed(requests)

    def _group_run(self, prepared: tuple[list[str], dict[str, Any]]) -> dict[str, np.ndarray[Any, Any]]:
        names, feed = prepared
        try:
            with self.tf.device(self.device):
                results = self.fn(**feed)
            return {name: results[name].numpy() for name in names}
        except Exception as e:
            raise _run_error(e, self.model.name) from e

    def _group_outputs(
        self,
        requests: list[InferRequest],
        result: dict[str, np.ndarray[Any, Any]],
        wanted: list[frozenset[str]],
    ) -> list[list[Tensor]]:
        return self._split_outputs(requests, self._output_arrays(result), wanted)

    def _output_arrays(
        self, result: dict[str, np.ndarray[Any, Any]]
    ) -> Iterator[tuple[TensorSpec, np.ndarray[Any, Any]]]:
        for name, arr in result.items():
            spec = self._outputs[name]
            if name in self._scalars and not self._batching and spec.reshape is None:
                arr = arr.reshape(spec.dims)  # a rank-0 output served as dims [1]
            yield spec, arr

    def _feed(self, requests: list[InferRequest]) -> dict[str, Any]:
        """The signature's keyword arguments: each input stacked, reshaped and made a tf.Tensor."""
        tf = self.tf
        feed: dict[str, Any] = {}
        for spec in self.model.inputs:
            arr = self._stacked(requests, spec)
            assert arr is not None  # optional inputs are refused at load: every input is here
            if spec.reshape is None and spec.name in self._scalars and not self._batching:
                arr = arr.reshape(())  # a rank-0 input served as dims [1]
            try:
                feed[spec.name] = (
                    tf.constant(arr, dtype=tf.string) if spec.datatype is BYTES else tf.constant(arr)
                )
            except (TypeError, ValueError) as e:
                raise InvalidArgumentError(
                    f"input '{spec.name}' of model '{self.model.name}' cannot be made a TensorFlow tensor: {e}"
                ) from e
        return feed

    def unload(self) -> None:
        self.fn = None
