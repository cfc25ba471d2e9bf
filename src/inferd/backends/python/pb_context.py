"""Which model instance a thread acts for when its code calls ``pb_utils``.

``pb_utils`` asks the hooks of an instance (hooks.py) for what a call needs from the server: response
senders, BLS, custom metrics, the model's folder. The backend sets an instance's hooks on the threads
it runs the instance in (``_set_thread_hooks``). A thread the model starts itself acts for the
instance whose thread started it, as it would in the reference's stub process, where every thread
is the instance's: ``Thread.start`` is wrapped (``install``) to hand the starting thread's hooks to
the new thread (weakly: a long-lived thread does not keep an unloaded instance alive; once the
instance is gone its calls are refused). Triton's vLLM backend creates its metrics in such a thread
while ``initialize`` still runs. A thread started otherwise (``_thread``, native code) falls back to
the instance created last.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

from inferd.backends.python.pb_errors import TritonModelException

if TYPE_CHECKING:
    from inferd.backends.python.pb_metrics import MetricsTarget
    from inferd.backends.python.pb_utils import InferenceRequest, InferenceResponse


class _Hooks:
    """What the hosting backend provides to ``pb_utils`` (per instance)."""

    #: a request of the instance got release flags (``set_release_flags``) since the backend looked
    marked = False
    #: inputs in GPU memory reach the model there (``FORCE_CPU_ONLY_INPUT_TENSORS: "no"``)
    gpu_inputs = False
    #: the instance unloaded: the threads it started act for nobody any more
    gone = False

    def send(self, request: InferenceRequest, response: InferenceResponse | None, flags: int) -> None:
        raise TritonModelException("response senders are not available outside a model instance")

    def released(self, request: InferenceRequest) -> None:
        """``request`` is gone and its sender never sent the final flag."""

    def bls(self, request: InferenceRequest, decoupled: bool) -> Any:
        raise TritonModelException("BLS is not available outside a model instance")

    def bls_async(self, request: InferenceRequest, decoupled: bool) -> Coroutine[Any, Any, Any]:
        async def refuse() -> Any:
            return self.bls(request, decoupled)

        return refuse()

    def metrics(self) -> MetricsTarget:
        raise TritonModelException("custom metrics are not available outside a model instance")

    def model_dir(self) -> str:
        raise TritonModelException("the model directory is not known outside a model instance")

    def model_ready(self, model_name: str, model_version: str) -> bool:
        raise TritonModelException("model readiness is not known outside a model instance")

    def control(
        self,
        prefix: str,
        action: str,
        name: str,
        config: str,
        files: dict[str, bytes] | None,
        dependents: bool,
    ) -> None:
        raise TritonModelException(f"{prefix}model control is not available outside a model instance")

    def module(self) -> Any:
        """The model's own module (``import model`` in its code), None when unknown."""
        return None


_local = threading.local()
_default_hooks = _Hooks()
#: the hooks of the instance created last and not unloaded: what a thread started otherwise uses
_fallback: list[_Hooks] = []
#: the attribute of a ``threading.Thread`` that holds the hooks it inherited (a weak reference)
_INHERITED = "_inferd_hooks"


def _hooks() -> _Hooks:
    h: _Hooks | None = getattr(_local, "hooks", None)
    if h is not None:
        return h
    ref: weakref.ref[_Hooks] | None = getattr(threading.current_thread(), _INHERITED, None)
    if ref is not None:
        h = ref()
        return h if h is not None and not h.gone else _default_hooks
    return _fallback[-1] if _fallback else _default_hooks


def _acting_for() -> _Hooks | None:
    """The hooks of the instance this thread acts for, set or inherited (never the fallback): what
    a thread it starts inherits, and whose folder a bare import searches (own_imports.py)."""
    h: _Hooks | None = getattr(_local, "hooks", None)
    if h is not None:
        return None if h is _default_hooks else h
    ref: weakref.ref[_Hooks] | None = getattr(threading.current_thread(), _INHERITED, None)
    if ref is None:
        return None
    h = ref()
    return h if h is not None and not h.gone else None


def _set_thread_hooks(hooks: _Hooks) -> None:
    _local.hooks = hooks


def _add_fallback(hooks: _Hooks) -> None:
    _fallback.append(hooks)


def _remove_fallback(hooks: _Hooks) -> None:
    with contextlib.suppress(ValueError):  # already gone: an instance's finalize may come twice
        _fallback.remove(hooks)


_thread_start = threading.Thread.start


def _start_inheriting(self: threading.Thread) -> None:
    """``Thread.start``: the new thread acts for the instance the starting thread acts for."""
    hooks = _acting_for()
    if hooks is not None:
        setattr(self, _INHERITED, weakref.ref(hooks))
    _thread_start(self)


def install() -> None:
    """Threads started from now on inherit the instance they were started for."""
    if threading.Thread.start is not _start_inheriting:
        setattr(threading.Thread, "start", _start_inheriting)  # noqa: B010  (mypy: a method)
