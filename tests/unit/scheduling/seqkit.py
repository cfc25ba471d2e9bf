"""What the sequence batcher's tests share: configs, a recording accumulator instance, requests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from poolkit import WAIT_S

from inferd.core.request import SEQUENCE_END, SEQUENCE_START, InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.stats import ModelStats
from inferd.core.tensor import Tensor
from inferd.core.types import BY_WIRE
from inferd.repository.config.parse import parse_config_text
from inferd.scheduling.sequence import SequenceBatcher

INT32 = BY_WIRE["INT32"]

CONTROLS = """
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
  ]
"""
STATE = """
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def config(mbs: int = 0, sequence: str = CONTROLS, instances: int = 1, decoupled: bool = False) -> Any:
    """A ModelConfig: IN -> OUT (INT32 [1]) with ``sequence`` inside ``sequence_batching``."""
    policy = "model_transaction_policy { decoupled: true }" if decoupled else ""
    return parse_config_text(
        f"""
name: "seq"
backend: "python"
max_batch_size: {mbs}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
instance_group [ {{ count: {instances} kind: KIND_CPU }} ]
{policy}
sequence_batching {{
  max_sequence_idle_microseconds: 5000000
  {sequence}
}}
""",
        "test",
    )


@dataclass
class Seen:
    """What the instance got for one request of a batch."""

    cid: int | str
    flags: int
    inputs: dict[str, Any]  # name -> the first element of the input

    def value(self, name: str) -> Any:
        return self.inputs.get(name)


class Accumulator:
    """An instance: OUT = IN + STATE_IN (when the model has the state), STATE_OUT = OUT; records
    every batch it executes (``batches``) and runs ``hook`` first (a gate)."""

    uses_bls = False
    last_timings: tuple[int, int, int] | None = None

    def __init__(
        self, hook: Callable[[list[InferRequest]], None] | None = None, inline_ok: bool = False
    ) -> None:
        self.hook = hook
        self.inline_ok = inline_ok
        self.batches: list[list[Seen]] = []
        self.unloaded = False
        self.lock = threading.Lock()

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        if self.hook is not None:
            self.hook(requests)
        with self.lock:
            self.batches.append(
                [
                    Seen(r.correlation_id, r.flags, {n: t.array.reshape(-1)[0] for n, t in r.inputs.items()})
                    for r in requests
                ]
            )
        out = []
        for r in requests:
            x = r.inputs["IN"].array
            state = r.inputs.get("STATE_IN")
            total = x + state.array if state is not None else x
            outputs = [Tensor("OUT", INT32, tuple(total.shape), array=total)]
            wanted = r.output_names
            if wanted is not None and "STATE_OUT" in wanted:
                outputs.append(Tensor("STATE_OUT", INT32, tuple(total.shape), array=total.copy()))
            out.append(InferResponse(r.model_name, "1", r.id, outputs=outputs))
        return out

    def unload(self) -> None:
        self.unloaded = True

    @property
    def seen(self) -> list[Seen]:
        return [s for b in self.batches for s in b]


def batcher(
    loop: asyncio.AbstractEventLoop,
    cfg: Any,
    instances: list[Any],
    clock: Callable[[], int] | None = None,
    model_dir: Path | None = None,
) -> SequenceBatcher:
    kwargs: dict[str, Any] = {} if clock is None else {"clock": clock}
    return SequenceBatcher(
        "seq",
        "1",
        cfg,
        [(f"seq_{i}", inst) for i, inst in enumerate(instances)],
        ModelStats(),
        loop,
        model_dir=model_dir,
        **kwargs,
    )


def req(
    cid: int | str, value: int, start: bool = False, end: bool = False, mbs: int = 0, **kw: Any
) -> InferRequest:
    shape = (1, 1) if mbs else (1,)
    arr = np.full(shape, value, dtype=np.int32)
    flags = (SEQUENCE_START if start else 0) | (SEQUENCE_END if end else 0)
    return InferRequest(
        model_name="seq",
        inputs={"IN": Tensor("IN", INT32, shape, array=arr)},
        id=f"{cid}:{value}",
        correlation_id=cid,
        flags=flags,
        **kw,
    )


def send(b: SequenceBatcher, loop: asyncio.AbstractEventLoop, *reqs: InferRequest) -> list[ResponseStream]:
    streams = []
    for r in reqs:
        r.stream = ResponseStream(loop)
        b.enqueue(r)
        streams.append(r.stream)
    return streams


async def results(streams: list[ResponseStream]) -> list[InferResponse]:
    return await asyncio.wait_for(asyncio.gather(*(s.first() for s in streams)), WAIT_S)


def out(resp: InferResponse) -> int:
    assert resp.error is None, resp.error
    return int(resp.outputs[0].array.reshape(-1)[0])
