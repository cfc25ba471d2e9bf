"""Request rescheduling, as the reference's Python backend (``python_be.cc``, ``pb_stub.cc``): a
model calls ``request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)`` in
``execute`` and the request, unanswered, is executed again later (an ``iterative_sequence``).

- A non-decoupled model returns None in the request's place ("Expected a None object in the
  execute function return list for reschduled request", the reference's spelling, fails the whole
  execute otherwise); a decoupled one may have sent responses without the final flag.
- The instance's ``rescheduler`` (set by the sequence batcher of an ``iterative_sequence`` model)
  takes the request back; without one the request is refused with the reference's text. The
  reference only logs it ("Failed to release request: ...") and its client waits for ever; here the
  client gets it as its answer.
- Only the exact flag reschedules (the reference compares with ``==``); other values release.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from inferd.backends.python import pb_utils
from inferd.backends.python.sending import release
from inferd.core.request import InferRequest
from inferd.errors import InternalError

if TYPE_CHECKING:
    from inferd.backends.python.backend import PythonInstance

RESCHEDULE = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE


def _type_name(value: Any) -> str:
    """A returned object's type as the reference's stub prints it (its classes are the binding's)."""
    if isinstance(value, pb_utils.InferenceResponse):
        return "<class 'c_python_backend_utils.InferenceResponse'>"
    return str(type(value))


def take_rescheduled(
    inst: PythonInstance, pb_requests: list[pb_utils.InferenceRequest], results: Any
) -> list[int]:
    """The places of the requests an execute released for another execute, closed (nothing more
    goes out for them from this execute); InternalError (the whole execute fails) when one of them
    got a response returned."""
    inst.hooks.marked = False
    again = [i for i, pr in enumerate(pb_requests) if getattr(pr, "_release", 0) == RESCHEDULE]
    if not again:
        return again
    if not inst.model.decoupled and type(results) is list and len(results) == len(pb_requests):
        for i, res in enumerate(results):  # in order, as the reference's stub checks them
            if res is None:
                continue
            if i in again:
                raise InternalError(
                    inst.error_prefix
                    + "Expected a None object in the execute function return list for reschduled request, "
                    f"found type '{_type_name(res)}'."
                )
            if not isinstance(res, pb_utils.InferenceResponse):
                break  # the usual check fails this execute first
    with inst.lock:
        for i in again:
            pr = pb_requests[i]
            pr._closed = True
            inst.open.pop(id(pr._core), None)
    return again


def reschedule(inst: PythonInstance, requests: list[InferRequest], again: list[int]) -> None:
    """Hand the released requests to the instance's rescheduler (or refuse them)."""
    for i in again:
        release(inst.rescheduler, requests[i], inst.model.version_str)
