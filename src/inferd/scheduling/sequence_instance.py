"""A model instance as the sequence batcher's pools see it (``sequence.py``): each execute gets its
batch in slot order with fillers (``direct``), and asks the backend for the state outputs too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from inferd.backends.base import BackendInstance
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.scheduling.sequence_state import filler
from inferd.scheduling.watchdog import Abortable

if TYPE_CHECKING:
    from inferd.scheduling.sequence_settings import SequenceSettings
    from inferd.scheduling.sequence_slots import Slot


class SequenceInstance:
    """A model instance as the sequence batcher's pool sees it: each execute gets the batch in slot
    order with fillers (``direct``), and asks the backend for the state outputs too."""

    def __init__(self, inner: BackendInstance, settings: SequenceSettings, tickets: dict[int, Slot]) -> None:
        """``tickets``: the batcher's, each request handed off -> its slot."""
        self.inner = inner
        self._settings = settings
        self._tickets = tickets

    @property
    def inline_ok(self) -> bool:
        return self.inner.inline_ok

    @property
    def uses_bls(self) -> bool:
        return self.inner.uses_bls

    @property
    def last_timings(self) -> tuple[int, int, int] | None:
        return self.inner.last_timings

    def unload(self) -> None:
        self.inner.unload()

    def execute(self, requests: list[InferRequest]) -> list[InferResponse] | None:
        b = self._settings
        full, positions = requests, None
        if b.fillers:
            full, positions = self._arrange(requests)
        saved = None
        if b.state_outputs:
            saved = [(r.outputs, r.output_names) for r in full]
            for r in full:
                if r.outputs is None:
                    r.outputs, r.output_names = b.all_outputs, b.all_output_names
                else:
                    names = (
                        r.output_names if r.output_names is not None else frozenset(o.name for o in r.outputs)
                    )
                    r.outputs, r.output_names = [*r.outputs, *b.state_outputs], names | b.state_output_names
        try:
            responses = self.inner.execute(full)
        finally:
            if saved is not None:
                for r, (outputs, output_names) in zip(full, saved, strict=True):
                    r.outputs, r.output_names = outputs, output_names
        if responses is None or positions is None:
            return responses
        return [responses[i] for i in positions]

    def _arrange(self, requests: list[InferRequest]) -> tuple[list[InferRequest], list[int] | None]:
        """``requests`` at their slots' positions, fillers in the empty slots below the highest; the
        position of each request of ``requests`` (None: nothing moved)."""
        tickets = self._tickets
        index = [tickets[id(r)].index for r in requests]
        if index == list(range(len(requests))):
            return requests, None
        by_slot = dict(zip(index, requests, strict=True))
        controls = self._settings.controls_for_filler()
        full = [by_slot[i] if i in by_slot else filler(requests[0], controls) for i in range(max(index) + 1)]
        return full, index


class AbortableSequenceInstance(SequenceInstance):
    """A wrapped instance whose execute the watchdog can stop (a process instance)."""

    def abort(self, reason: str) -> None:
        inner = self.inner
        assert isinstance(inner, Abortable)
        inner.abort(reason)


def wrap_instance(
    inner: BackendInstance, settings: SequenceSettings, tickets: dict[int, Slot]
) -> SequenceInstance:
    """The wrapper for ``inner``, abortable when ``inner`` is."""
    if isinstance(inner, Abortable):
        return AbortableSequenceInstance(inner, settings, tickets)
    return SequenceInstance(inner, settings, tickets)
