"""``triton_python_backend_utils`` for models that run in-process.

A ``model.py`` written for Triton imports this module under its Triton name; tensors are plain
numpy arrays shared with the server (no shared-memory copy), so ``as_numpy()`` costs nothing.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import weakref
from collections.abc import Iterable
from typing import Any

import numpy as np

from inferd.backends.python import dlpack as _dlpack
from inferd.backends.python.pb_errors import TritonError as TritonError
from inferd.backends.python.pb_errors import TritonModelException as TritonModelException
from inferd.core import request as _core_request
from inferd.core import tensor as _core_tensor
from inferd.core import types as _types

# -- constants ---------------------------------------------------------------------------------
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = _core_request.SEQUENCE_START
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = _core_request.SEQUENCE_END
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2

TRITON_STRING_TO_NUMPY: dict[str, Any] = {
    row.config: (np.object_ if row is _types.BYTES else row.numpy.type)
    for row in _types.BY_CONFIG.values()
    if row is not _types.BF16
}


def triton_string_to_numpy(triton_type_string: str) -> Any:
    """``"TYPE_FP32"`` -> ``np.float32`` (``TYPE_STRING`` -> ``np.object_``)."""
    return TRITON_STRING_TO_NUMPY[triton_type_string]


def triton_to_numpy_type(data_type: int) -> Any:
    """TRITONSERVER_DataType code -> numpy type."""
    row = _types.BY_TRITON_CODE[data_type]
    return np.object_ if row is _types.BYTES else row.numpy.type


def numpy_to_triton_type(data_type: Any) -> int:
    """numpy type -> TRITONSERVER_DataType code."""
    return _types.from_numpy(np.dtype(data_type)).triton_code


def serialize_byte_tensor(input_tensor: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    """Object/bytes array -> uint8 array of length-prefixed elements (None when empty)."""
    if input_tensor.size == 0:
        return None
    return np.frombuffer(_core_tensor.serialize_bytes(input_tensor), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor: bytes) -> np.ndarray[Any, Any]:
    """Length-prefixed bytes -> object array of ``bytes``."""
    return _core_tensor.deserialize_bytes(encoded_tensor)


# -- tensors -----------------------------------------------------------------------------------
class Tensor:
    """A named numpy tensor, optionally with the Triton datatype its array stands for.

    The datatype matters only where numpy has no dtype of its own: a BF16 tensor holds its
    elements as raw ``uint16`` words (the upper half of the float32 bit pattern), so
    ``as_numpy()`` of a BF16 tensor returns those words; ``to_dlpack()`` hands them on as
    ``bfloat16`` (e.g. to ``torch.from_dlpack``), and ``Tensor.from_dlpack`` of a bfloat16
    tensor gives a BF16 Tensor.
    """

    __slots__ = ("_array", "_dt", "_name")

    def __init__(self, name: str, data: Any, dtype: Any = None) -> None:
        if not isinstance(data, np.ndarray):
            data = np.asarray(data, dtype=dtype)
        self._name = name
        self._array = data
        self._dt: _types.DataType | None = None

    @staticmethod
    def _typed(name: str, array: np.ndarray[Any, Any], datatype: _types.DataType | None) -> Tensor:
        """A tensor over ``array`` whose Triton datatype is ``datatype`` (None: the array's own)."""
        self = Tensor.__new__(Tensor)
        self._name = name
        self._array = array
        self._dt = datatype
        return self

    def _datatype(self) -> _types.DataType | None:
        """The Triton datatype this tensor was given (BF16 over uint16 words), else None."""
        return self._dt

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> np.ndarray[Any, Any]:
        """The data as numpy, shared, not copied (BF16: the raw ``uint16`` words)."""
        return self._array  # type: ignore[no-any-return]

    def shape(self) -> list[int]:
        return list(self._array.shape)

    def triton_dtype(self) -> int:
        dt = self._dt
        return (dt if dt is not None else _types.from_numpy(self._array.dtype)).triton_code

    def is_cpu(self) -> bool:
        return True

    def to_dlpack(self) -> Any:
        """A DLPack capsule (``"dltensor"``) over this tensor's memory, read-only inputs included."""
        return _dlpack.export(self._array, self._dt, None, None, None, None)

    def __dlpack__(
        self, stream: Any = None, *, max_version: Any = None, dl_device: Any = None, copy: Any = None
    ) -> Any:
        return _dlpack.export(self._array, self._dt, stream, max_version, dl_device, copy)

    def __dlpack_device__(self) -> tuple[int, int]:
        return (_dlpack.DL_CPU, 0)

    @staticmethod
    def from_dlpack(name: str, capsule: Any) -> Tensor:
        """A tensor over the memory of a DLPack capsule or of an object with ``__dlpack__`` (no copy).

        The capsule is consumed; the producer's memory stays alive until the tensor's array is
        freed. bfloat16 becomes a BF16 tensor (over ``uint16`` words).
        """
        if hasattr(capsule, "__dlpack__"):
            device = getattr(capsule, "__dlpack_device__", None)
            if device is None:
                raise TritonModelException(
                    "Provided tensor is not supported. Tensor must be a DLPack capsule or have "
                    "`__dlpack__` and `__dlpack_device__` attributes"
                )
            kind = int(device()[0])
            if kind not in (_dlpack.DL_CPU, _dlpack.DL_CUDA_HOST):
                raise TritonModelException(f"DLDevice type {kind} is not support by Python backend.")
            try:
                capsule = capsule.__dlpack__(stream=None, max_version=_dlpack.DLPACK_VERSION)
            except TypeError:  # a producer older than DLPack 1.0
                capsule = capsule.__dlpack__(stream=None)
        array, datatype = _dlpack.consume(capsule)
        return Tensor._typed(name, array, datatype)

    def __repr__(self) -> str:
        dt = self._dt
        shown = dt.wire if dt is _types.BF16 else self._array.dtype
        return f"Tensor({self._name!r}, shape={list(self._array.shape)}, dtype={shown})"


# -- requests and responses --------------------------------------------------------------------
class InferenceResponse:
    """A model's answer to one request: output tensors or an error."""

    __slots__ = ("_error", "_outputs")

    def __init__(
        self, output_tensors: Iterable[Tensor] | None = None, error: TritonError | None = None
    ) -> None:
        self._outputs = list(output_tensors) if output_tensors is not None else []
        self._error = error

    def output_tensors(self) -> list[Tensor]:
        return self._outputs

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


class InferenceResponseSender:
    """Sends the responses of one request (decoupled models, or one response otherwise).

    Usable from any thread, also after ``execute`` returned; ``flags`` is 0 or
    ``TRITONSERVER_RESPONSE_COMPLETE_FINAL``, and the final flag closes the sender.
    """

    __slots__ = ("__weakref__", "_request")

    def __init__(self, request: InferenceRequest) -> None:
        self._request = request

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        if response is not None and not isinstance(response, InferenceResponse):
            raise TypeError(
                "send(): incompatible function arguments. The following argument types are supported:\n"
                "    1. (self: c_python_backend_utils.InferenceResponseSender, response: "
                "c_python_backend_utils.InferenceResponse = None, flags: int = 0) -> None\n\n"
                f"Invoked with: {self!r}, {response!r}"
            )
        request = self._request
        hooks = request._hooks
        (hooks if hooks is not None else _hooks()).send(request, response, flags)

    def is_cancelled(self) -> bool:
        return self._request.is_cancelled()


class InferenceRequest:
    """A request as a model sees it; also the BLS request a model builds and ``exec()``s."""

    __slots__ = (
        "_closed",
        "_core",
        "_hooks",
        "_model_name",
        "_model_version",
        "_n_sent",
        "_output_names",
        "_params_json",
        "_sender",
        "_tensors",
    )

    def __init__(
        self,
        model_name: str = "",
        requested_output_names: Iterable[str] = (),
        inputs: Iterable[Tensor] = (),
        request_id: str = "",
        correlation_id: int | str = 0,
        model_version: int = -1,
        flags: int = 0,
        timeout: int = 0,
        preferred_memory: Any = None,
        trace: Any = None,
        parameters: dict[str, Any] | str | None = None,
        _core: _core_request.InferRequest | None = None,
        _output_names: frozenset[str] | None = None,
    ) -> None:
        self._tensors: dict[str, Tensor] | None = None
        self._hooks: _Hooks | None = None
        self._sender: weakref.ref[InferenceResponseSender] | None = None
        self._n_sent = 0
        self._closed = False
        if _core is not None:
            self._core = _core
            self._model_name = _core.model_name
            self._model_version = -1
            self._output_names = _output_names
            self._params_json: str | None = None
            return
        params = json.loads(parameters) if isinstance(parameters, str) else dict(parameters or {})
        self._core = _core_request.InferRequest(
            model_name=model_name,
            inputs={
                t.name(): _core_tensor.Tensor.from_array(t.name(), t.as_numpy(), t._datatype())
                for t in inputs
            },
            model_version="" if model_version < 0 else str(model_version),
            id=request_id,
            parameters=params,
            outputs=[_core_request.RequestedOutput(n) for n in requested_output_names] or None,
            correlation_id=correlation_id,
            flags=flags,
            timeout_us=timeout,
        )
        self._model_name = model_name
        self._model_version = model_version
        self._output_names = frozenset(requested_output_names)
        self._params_json = None

    @classmethod
    def _wrap(
        cls,
        core: _core_request.InferRequest,
        output_names: frozenset[str] | None,
        hooks: _Hooks | None = None,
    ) -> InferenceRequest:
        """A received request (the hot path: no keyword-argument constructor).

        ``hooks``: where its response sender sends, from whichever thread (None: the thread's).
        """
        self = cls.__new__(cls)
        self._core = core
        self._tensors = None
        self._model_name = core.model_name
        self._model_version = -1
        self._output_names = output_names
        self._params_json = None
        self._hooks = hooks
        self._sender = None
        self._n_sent = 0
        self._closed = False
        return self

    # received-request accessors
    def inputs(self) -> list[Tensor]:
        return list(self._input_map().values())

    def _input_map(self) -> dict[str, Tensor]:
        t = self._tensors
        if t is None:
            t = self._tensors = {
                name: Tensor._typed(name, ct.array, ct.datatype) for name, ct in self._core.inputs.items()
            }
        return t

    def get_input(self, name: str) -> Tensor | None:
        t = self._tensors
        if t is not None:
            return t.get(name)
        ct = self._core.inputs.get(name)
        return None if ct is None else Tensor._typed(name, ct.array, ct.datatype)

    def requested_output_names(self) -> set[str]:
        return set(self._output_names or ())

    def request_id(self) -> str:
        return self._core.id

    def correlation_id(self) -> int | str:
        return self._core.correlation_id

    def flags(self) -> int:
        return self._core.flags

    def timeout(self) -> int:
        return self._core.timeout_us

    def parameters(self) -> str:
        p = self._params_json
        if p is None:
            p = self._params_json = json.dumps(self._core.parameters, separators=(",", ":"))
        return p

    def model_name(self) -> str:
        return self._model_name

    def trace(self) -> None:
        return None

    def get_response_sender(self) -> InferenceResponseSender:
        """The request's response sender (the same object while the model holds it, as Triton's)."""
        # a weak reference: request <-> sender must not be a cycle, or a released request would
        # wait for the cyclic GC before its stream is closed
        ref = self._sender
        s = ref() if ref is not None else None
        if s is None:
            s = InferenceResponseSender(self)
            self._sender = weakref.ref(s)
        return s

    def is_cancelled(self) -> bool:
        s = self._core.stream
        return bool(s is not None and s.cancelled)

    def set_release_flags(self, flags: int) -> None:
        if flags != TRITONSERVER_REQUEST_RELEASE_ALL:
            raise TritonModelException(
                "Request rescheduling is available only for models with sequence_batching iterative_sequence"
            )

    # BLS
    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on another model of the server and wait (BLS)."""
        responses = _hooks().bls(self._core)
        if decoupled:
            return iter(responses)
        return responses[0] if responses else InferenceResponse()

    async def async_exec(self, decoupled: bool = False) -> Any:
        import asyncio

        return await asyncio.to_thread(self.exec, decoupled)


class _DecoupledInferenceRequest(InferenceRequest):
    """A received request of a decoupled model.

    When the model lets go of it (and of its sender) without sending the final flag, no response
    can ever follow: the backend closes its stream instead of leaving the client waiting.
    """

    __slots__ = ()

    def __del__(self) -> None:
        if not self._closed and self._hooks is not None:
            try:
                self._hooks.released(self)
            except Exception:  # a finalizer must not raise (interpreter shutdown, closed loop)
                logging.getLogger("inferd.model").debug("closing a released request failed", exc_info=True)


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The input called ``name`` (None when the request lacks it: how optional inputs are seen)."""
    return inference_request.get_input(name)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for t in inference_response.output_tensors():
        if t.name() == name:
            return t
    return None


def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for i in model_config.get("input", []):
        if i["name"] == name:
            return i  # type: ignore[no-any-return]
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for o in model_config.get("output", []):
        if o["name"] == name:
            return o  # type: ignore[no-any-return]
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))


# -- auto-complete ----------------------------------------------------------------------------
class ModelConfig:
    """The config a model's ``auto_complete_config`` may read and complete."""

    def __init__(self, model_config: dict[str, Any] | str) -> None:
        self._cfg: dict[str, Any] = (
            json.loads(model_config) if isinstance(model_config, str) else model_config
        )

    def as_dict(self) -> dict[str, Any]:
        return self._cfg

    def set_max_batch_size(self, max_batch_size: int) -> None:
        cur = int(self._cfg.get("max_batch_size", 0))
        if cur > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {cur} which is greater than the value "
                f"{max_batch_size} set by auto-complete"
            )
        self._cfg["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        if "sequence_batching" in self._cfg:
            raise ValueError("Configuration specified scheduling_choice as 'sequence_batching'")
        self._cfg.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        self._cfg["model_transaction_policy"] = dict(transaction_policy_dict)

    def _add(self, key: str, entry: dict[str, Any]) -> None:
        if "name" not in entry:
            raise ValueError(f"{key} in auto-complete-config must contain the 'name' property")
        entry = dict(entry)
        if "dims" in entry:
            entry["dims"] = list(entry["dims"])
        lst = self._cfg.setdefault(key, [])
        for existing in lst:
            if existing["name"] == entry["name"]:
                for k, v in entry.items():
                    if k in existing and existing[k] != v and k != "name":
                        raise ValueError(
                            f"unable to load model '{self._cfg.get('name', '')}', configuration expects "
                            f"{k} {existing[k]} for {key} '{entry['name']}' but auto-complete sets {v}"
                        )
                existing.update({k: v for k, v in entry.items() if k not in existing})
                return
        lst.append(entry)

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output)


# -- logging -----------------------------------------------------------------------------------
class Logger:
    """Writes to the server log at the caller's file and line, as Triton's Logger."""

    INFO = 0
    WARNING = 1
    ERROR = 2
    VERBOSE = 3
    _LEVELS = {INFO: logging.INFO, WARNING: logging.WARNING, ERROR: logging.ERROR, VERBOSE: logging.DEBUG}
    _log = logging.getLogger("inferd.model")

    @classmethod
    def log(cls, message: str, level: int = INFO) -> None:
        cls._log.log(cls._LEVELS.get(level, logging.INFO), '"%s"', message, stacklevel=2)

    @classmethod
    def log_info(cls, message: str) -> None:
        cls._log.info('"%s"', message, stacklevel=2)

    @classmethod
    def log_warn(cls, message: str) -> None:
        cls._log.warning('"%s"', message, stacklevel=2)

    @classmethod
    def log_error(cls, message: str) -> None:
        cls._log.error('"%s"', message, stacklevel=2)

    @classmethod
    def log_verbose(cls, message: str) -> None:
        cls._log.debug('"%s"', message, stacklevel=2)


# -- the server side of BLS and response senders ----------------------------------------------
class _Hooks:
    """What the hosting backend provides to this module (per worker thread)."""

    def send(self, request: InferenceRequest, response: InferenceResponse | None, flags: int) -> None:
        raise TritonModelException("response senders are not available outside a model instance")

    def released(self, request: InferenceRequest) -> None:
        """``request`` (of a decoupled model) is gone and its sender never sent the final flag."""

    def bls(self, request: _core_request.InferRequest) -> list[InferenceResponse]:
        raise TritonModelException("BLS is not available outside a model instance")


_local = threading.local()
_default_hooks = _Hooks()


def _hooks() -> _Hooks:
    h: _Hooks | None = getattr(_local, "hooks", None)
    return h if h is not None else _default_hooks


def _set_thread_hooks(hooks: _Hooks) -> None:
    _local.hooks = hooks


def install() -> None:
    """Make ``import triton_python_backend_utils`` resolve to this module."""
    sys.modules.setdefault("triton_python_backend_utils", sys.modules[__name__])
