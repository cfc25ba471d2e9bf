"""``triton_python_backend_utils`` for models that run in-process.

A ``model.py`` written for Triton imports this module under its Triton name; tensors are plain
numpy arrays shared with the server (no shared-memory copy), so ``as_numpy()`` costs nothing.
Calls check their arguments as the reference's pybind11 bindings do, with its texts (``pb_args``).
What a call needs from the server (response senders, BLS, metrics, the model's folder) it asks
the hooks of the instance it runs for (pb_context.py): set per thread by the backend for the threads
it runs, inherited by the threads the model starts.
"""

from __future__ import annotations

import json
import sys
import weakref
from collections.abc import Coroutine
from typing import Any

from inferd.backends.python import pb_context as _context
from inferd.backends.python.pb_args import REQUIRED, bind, incompatible, is_int, is_sequence, is_str_list
from inferd.backends.python.pb_bls import ResponseIterator as ResponseIterator
from inferd.backends.python.pb_config import Logger as Logger
from inferd.backends.python.pb_config import ModelConfig as ModelConfig
from inferd.backends.python.pb_config import get_input_config_by_name as get_input_config_by_name
from inferd.backends.python.pb_config import get_output_config_by_name as get_output_config_by_name
from inferd.backends.python.pb_config import (
    using_decoupled_model_transaction_policy as using_decoupled_model_transaction_policy,
)
from inferd.backends.python.pb_context import _add_fallback as _add_fallback
from inferd.backends.python.pb_context import _default_hooks as _default_hooks
from inferd.backends.python.pb_context import _fallback as _fallback
from inferd.backends.python.pb_context import _Hooks as _Hooks
from inferd.backends.python.pb_context import _hooks as _hooks
from inferd.backends.python.pb_context import _local as _local
from inferd.backends.python.pb_context import _remove_fallback as _remove_fallback
from inferd.backends.python.pb_context import _set_thread_hooks as _set_thread_hooks
from inferd.backends.python.pb_errors import TritonError as TritonError
from inferd.backends.python.pb_errors import TritonModelException as TritonModelException
from inferd.backends.python.pb_metrics import Metric as Metric
from inferd.backends.python.pb_metrics import MetricFamily as MetricFamily
from inferd.backends.python.pb_metrics import MetricKind as MetricKind
from inferd.backends.python.pb_metrics import MetricsTarget as MetricsTarget
from inferd.backends.python.pb_tensor import BF16_AS_NUMPY as BF16_AS_NUMPY
from inferd.backends.python.pb_tensor import TRITON_STRING_TO_NUMPY as TRITON_STRING_TO_NUMPY
from inferd.backends.python.pb_tensor import Tensor as Tensor
from inferd.backends.python.pb_tensor import deserialize_bytes_tensor as deserialize_bytes_tensor
from inferd.backends.python.pb_tensor import numpy_to_triton_type as numpy_to_triton_type
from inferd.backends.python.pb_tensor import serialize_byte_tensor as serialize_byte_tensor
from inferd.backends.python.pb_tensor import triton_string_to_numpy as triton_string_to_numpy
from inferd.backends.python.pb_tensor import triton_to_numpy_type as triton_to_numpy_type
from inferd.core import request as _core_request

# -- constants ---------------------------------------------------------------------------------
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = _core_request.SEQUENCE_START
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = _core_request.SEQUENCE_END
TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_MEMORY_CPU = 0
TRITONSERVER_MEMORY_CPU_PINNED = 1
TRITONSERVER_MEMORY_GPU = 2


class PreferredMemory:
    """Where a BLS request would like its outputs: ``TRITONSERVER_MEMORY_GPU`` keeps a GPU model's
    outputs in GPU memory; otherwise they come to the host."""

    def __init__(
        self, preferred_memory_type: int = TRITONSERVER_MEMORY_CPU, preferred_device_id: int = 0
    ) -> None:
        self.preferred_memory_type = preferred_memory_type
        self.preferred_device_id = preferred_device_id


class InferenceTrace:
    """A request's trace (``request.trace()``): a BLS request made with it is traced as its child."""

    __slots__ = ("_trace",)

    def __init__(self, _trace: _core_request.RequestTrace | None = None) -> None:
        self._trace = _trace

    def get_context(self) -> str | None:
        """The OpenTelemetry context (JSON with ``traceparent``) in that mode, else None."""
        return None if self._trace is None else self._trace.context()


_DEFAULT_MEMORY = PreferredMemory()
_DEFAULT_TRACE = InferenceTrace()


# -- tensors: pb_tensor.py ---------------------------------------------------------------------


# -- requests and responses --------------------------------------------------------------------
_NO_TENSORS: list[Tensor] = []


class InferenceResponse:
    """A model's answer to one request: output tensors or an error."""

    __slots__ = ("_error", "_outputs")

    def __init__(self, output_tensors: Any = _NO_TENSORS, error: Any = None) -> None:
        if error is None and type(output_tensors) is list:  # what models write: a list of Tensors
            for t in output_tensors:
                if type(t) is not Tensor:
                    break
            else:
                self._outputs = list(output_tensors)
                self._error = None
                return
        if (not is_sequence(output_tensors)) or (error is not None and not isinstance(error, TritonError)):
            kwargs = {"output_tensors": output_tensors} if output_tensors is not _NO_TENSORS else {}
            if error is not None:
                kwargs["error"] = error
            raise incompatible(
                "__init__",
                "c_python_backend_utils.InferenceResponse(output_tensors: List[c_python_backend_utils.Tensor] = [], "
                "error: c_python_backend_utils.TritonError = None)",
                (),
                kwargs,
                True,
            )
        outs = list(output_tensors)
        for t in outs:
            if type(t) is not Tensor:
                if t is None:
                    raise TritonModelException("Output tensor for inference response should not be empty.")
                if not isinstance(t, Tensor):
                    raise incompatible(
                        "__init__",
                        "c_python_backend_utils.InferenceResponse(output_tensors: "
                        "List[c_python_backend_utils.Tensor] = [], error: c_python_backend_utils.TritonError = None)",
                        (),
                        {"output_tensors": output_tensors},
                        True,
                    )
        self._outputs = outs
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
        if (response is not None and not isinstance(response, InferenceResponse)) or not is_int(flags):
            raise incompatible(
                "send",
                "(self: c_python_backend_utils.InferenceResponseSender, response: "
                "c_python_backend_utils.InferenceResponse = None, flags: int = 0) -> None",
                (self, response) if flags == 0 else (self, response, flags),
                {},
            )
        request = self._request
        hooks = request._hooks
        (hooks if hooks is not None else _hooks()).send(request, response, flags)

    def is_cancelled(self) -> bool:
        return self._request.is_cancelled()


_REQUEST_ARGS = (
    ("request_id", ""),
    ("correlation_id", 0),
    ("inputs", REQUIRED),
    ("requested_output_names", REQUIRED),
    ("model_name", REQUIRED),
    ("model_version", -1),
    ("flags", 0),
    ("timeout", 0),
    ("preferred_memory", _DEFAULT_MEMORY),
    ("trace", _DEFAULT_TRACE),
    ("parameters", None),
)
_REQUEST_SIGNATURE = (
    "c_python_backend_utils.InferenceRequest(request_id: str = '', correlation_id: object = 0, inputs: "
    "List[triton::backend::python::PbTensor], requested_output_names: List[str], model_name: str, "
    "model_version: int = -1, flags: int = 0, timeout: int = 0, preferred_memory: "
    f"c_python_backend_utils.PreferredMemory = {_DEFAULT_MEMORY!r}, trace: "
    f"c_python_backend_utils.InferenceTrace = {_DEFAULT_TRACE!r}, parameters: object = None)"
)


def _bind_request(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The BLS request constructor's arguments, checked as the reference's binding checks them."""
    a = bind(_REQUEST_ARGS, args, kwargs)
    ok = (
        a is not None
        and isinstance(a["request_id"], str)
        and a["correlation_id"] is not None
        and is_sequence(a["inputs"])
        and all(t is None or isinstance(t, Tensor) for t in a["inputs"])
        and is_str_list(a["requested_output_names"])
        and isinstance(a["model_name"], str)
        and is_int(a["model_version"])
        and is_int(a["flags"])
        and is_int(a["timeout"])
        and isinstance(a["preferred_memory"], PreferredMemory)
        and isinstance(a["trace"], InferenceTrace)
    )
    if not ok or a is None:
        raise incompatible("__init__", _REQUEST_SIGNATURE, args, kwargs, True)
    if not isinstance(a["correlation_id"], (int, str)):
        raise TritonModelException("Correlation ID must be integer or string")
    for t in a["inputs"]:
        if t is None:
            raise TritonModelException(
                f"Input tensor for request with id '{a['request_id']}' and model name '{a['model_name']}' "
                "should not be empty."
            )
    params = a["parameters"]
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise TritonModelException(f"Expect N8pybind114dictE, got {type(params)}")
    for k, v in params.items():
        if not isinstance(k, str):
            raise TritonModelException(f"Expect parameters keys to have type str, found type {type(k)}")
        if not isinstance(v, (bool, int, str)):
            raise TritonModelException(
                f"Expect parameters values to have type bool/int/str, found type {type(v)}"
            )
    a["parameters"] = params
    return a


class InferenceRequest:
    """A request as a model sees it; also the BLS request a model builds and ``exec()``s."""

    __slots__ = (
        "_closed",
        "_core",
        "_gpu_outputs",
        "_hooks",
        "_model_name",
        "_model_version",
        "_n_sent",
        "_output_names",
        "_params_json",
        "_release",
        "_sender",
        "_tensors",
    )
    _model_name: str

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._tensors: dict[str, Tensor] | None = None
        self._hooks: _Hooks | None = None
        #: a BLS request's ``preferred_memory`` asks for GPU outputs: they stay where the model made them
        self._gpu_outputs = False
        self._sender: weakref.ref[InferenceResponseSender] | None = None
        self._n_sent = 0
        self._closed = False
        self._params_json: str | None = None
        core = kwargs.pop("_core", None)
        if core is not None:  # a received request (tests; the backend uses _wrap)
            self._core: _core_request.InferRequest = core
            self._model_name = core.model_name
            self._model_version = -1
            self._output_names: frozenset[str] | None = kwargs.pop("_output_names", None)
            return
        a = _bind_request(args, kwargs)
        names = a["requested_output_names"]
        self._core = _core_request.InferRequest(
            model_name=a["model_name"],
            inputs={t.name(): t._core() for t in a["inputs"]},
            model_version="" if a["model_version"] < 0 else str(a["model_version"]),
            id=a["request_id"],
            parameters=a["parameters"],
            outputs=[_core_request.RequestedOutput(n) for n in names] or None,
            correlation_id=a["correlation_id"],
            flags=a["flags"],
            timeout_us=a["timeout"],
            trace=None if a["trace"]._trace is None else a["trace"]._trace.child(),
        )
        self._model_name = a["model_name"]
        self._model_version = a["model_version"]
        self._output_names = frozenset(names)
        self._gpu_outputs = a["preferred_memory"].preferred_memory_type == TRITONSERVER_MEMORY_GPU

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
        self._gpu_outputs = False
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
            hooks = self._hooks
            if hooks is not None and hooks.gpu_inputs:  # FORCE_CPU_ONLY_INPUT_TENSORS: "no"
                t = {name: Tensor._of_core(name, ct, True) for name, ct in self._core.inputs.items()}
            else:
                t = {
                    name: Tensor._typed(name, ct.array, ct.datatype) for name, ct in self._core.inputs.items()
                }
            self._tensors = t
        return t

    def get_input(self, name: str) -> Tensor | None:
        t = self._tensors
        if t is not None:
            return t.get(name)
        ct = self._core.inputs.get(name)
        if ct is None:
            return None
        if ct.device is None:  # (the common case: no call more than before GPU tensors)
            return Tensor._typed(name, ct.array, ct.datatype)
        hooks = self._hooks
        return Tensor._of_core(name, ct, hooks is not None and hooks.gpu_inputs)

    def requested_output_names(self) -> set[str]:
        return set(self._output_names or ())

    def request_id(self) -> str:
        return self._core.id

    def correlation_id(self) -> int | str:
        return self._core.correlation_id

    def flags(self) -> int:
        return self._core.flags

    def set_flags(self, flags: int) -> None:
        """The flags a BLS request carries (sequence start and end)."""
        if not is_int(flags):
            raise incompatible(
                "set_flags",
                "(self: c_python_backend_utils.InferenceRequest, arg0: int) -> None",
                (self, flags),
                {},
            )
        self._core.flags = flags

    def timeout(self) -> int:
        return self._core.timeout_us

    def parameters(self) -> str:
        p = self._params_json
        if p is None:
            p = self._params_json = json.dumps(self._core.parameters, separators=(",", ":"))
        return p

    def model_name(self) -> str:
        return self._model_name

    def trace(self) -> InferenceTrace:
        t = self._core.trace
        return _DEFAULT_TRACE if t is None else InferenceTrace(t)

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
        """How the backend releases this request after ``execute``: with
        ``TRITONSERVER_REQUEST_RELEASE_RESCHEDULE``, for another execute (backends/python/reschedule.py)."""
        if not is_int(flags) or not 0 <= flags < 2**32:
            raise incompatible(
                "set_release_flags",
                "(self: c_python_backend_utils.InferenceRequest, arg0: int) -> None",
                (self, flags),
                {},
            )
        self._release = flags  # (unset on most requests: read with getattr)
        if self._hooks is not None:
            self._hooks.marked = True

    # BLS
    def exec(self, decoupled: bool = False) -> Any:
        """Run this request on another model of the server and wait (BLS): its response, or with
        ``decoupled`` an iterator over its responses as they come."""
        return _hooks().bls(self, bool(decoupled))

    def async_exec(self, decoupled: bool = False) -> Coroutine[Any, Any, Any]:
        """``exec`` to await: the model's loop runs other executes while the request runs."""
        return _hooks().bls_async(self, bool(decoupled))


class _ReleasedRequest(InferenceRequest):
    """A received request whose responses may come after ``execute`` returned (decoupled models,
    and non-decoupled ones that answer through their sender).

    When the model lets go of it (and of its sender) without sending the final flag, no response
    can ever follow: the backend closes its stream instead of leaving the client waiting.
    """

    __slots__ = ()

    def __del__(self) -> None:
        if not self._closed and self._hooks is not None:
            try:
                self._hooks.released(self)
            except Exception:  # a finalizer must not raise (interpreter shutdown, closed loop)
                import logging

                logging.getLogger("inferd.model").debug("closing a released request failed", exc_info=True)


_DecoupledInferenceRequest = _ReleasedRequest


def get_input_tensor_by_name(inference_request: InferenceRequest, name: str) -> Tensor | None:
    """The input called ``name`` (None when the request lacks it: how optional inputs are seen)."""
    return inference_request.get_input(name)


def get_output_tensor_by_name(inference_response: InferenceResponse, name: str) -> Tensor | None:
    for t in inference_response.output_tensors():
        if t.name() == name:
            return t
    return None


# -- the model's server ------------------------------------------------------------------------
def get_model_dir() -> str:
    """The folder of the model's version (where its ``model.py`` is)."""
    return _hooks().model_dir()


def is_model_ready(model_name: str, model_version: str = "") -> bool:
    """Whether a model (a version of it; "": any) of the server is READY."""
    if not isinstance(model_name, str) or not isinstance(model_version, str):
        raise incompatible(
            "is_model_ready",
            "(model_name: str, model_version: str = '') -> bool",
            (model_name, model_version),
            {},
        )
    return _hooks().model_ready(model_name, model_version)


def load_model(model_name: str, config: str = "", files: Any = None) -> None:
    """Load (or reload) a model with an optional config override (JSON) and ``file:<path>``
    overrides, as the repository API does (needs ``--model-control-mode=explicit``); returns once
    it is READY."""
    if not isinstance(model_name, str) or not isinstance(config, str):
        raise incompatible(
            "load_model",
            "(model_name: str, config: str = '', files: dict = None) -> None",
            (model_name, config),
            {},
        )
    if files is not None and not isinstance(files, dict):
        raise TritonModelException(
            f"failed to load model '{model_name}', files should be a dictionary of file paths and file contents"
        )
    for key, value in (files or {}).items():  # the reference's binding casts each to str and bytes
        for item, kind in ((key, str), (value, bytes)):
            if not isinstance(item, kind):
                raise TypeError(
                    f"Object of type '{type(item).__name__}' is not an instance of '{kind.__name__}'"
                )
    _hooks().control("Failed to load model: ", "load", model_name, config, files, False)


def unload_model(model_name: str, unload_dependents: bool = False) -> None:
    """Unload a model (and with ``unload_dependents`` the steps its load brought in), as the
    repository API does (needs ``--model-control-mode=explicit``)."""
    if not isinstance(model_name, str) or not isinstance(unload_dependents, bool):
        raise incompatible(
            "unload_model",
            "(model_name: str, unload_dependents: bool = False) -> None",
            (model_name, unload_dependents),
            {},
        )
    _hooks().control("Failed to unload model: ", "unload", model_name, "", None, unload_dependents)


def install() -> None:
    """Make ``import triton_python_backend_utils`` resolve to this module; the threads a model starts
    act for its instance."""
    sys.modules.setdefault("triton_python_backend_utils", sys.modules[__name__])
    _context.install()
