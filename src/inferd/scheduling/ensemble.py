"""Ensemble scheduler: runs the steps of an ensemble as a DAG of requests to the composing models."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.errors import InferdError, InternalError, InvalidArgumentError, UnavailableError

if TYPE_CHECKING:
    from inferd.core.model import Model

log = logging.getLogger("inferd.ensemble")

InferFn = Callable[[InferRequest], Awaitable[InferResponse]]
#: Triton 2.51 puts these parameters on every ensemble response.
_ENSEMBLE_PARAMS = {"sequence_id": 0, "sequence_start": False, "sequence_end": False}


@dataclass(slots=True, frozen=True)
class Step:
    """One ensemble step: model, version ("" = latest) and tensor maps (step name -> ensemble name)."""

    model_name: str
    model_version: str
    input_map: tuple[tuple[str, str], ...]
    output_map: tuple[tuple[str, str], ...]


def plan_steps(config: Any) -> list[list[Step]]:
    """Group the steps into waves: each wave needs only tensors the previous waves produce."""
    steps = [
        Step(
            s.model_name,
            "" if s.model_version <= 0 else str(s.model_version),
            tuple(sorted(s.input_map.items())),
            tuple(sorted(s.output_map.items())),
        )
        for s in config.ensemble_scheduling.step
    ]
    available = {i.name for i in config.input}
    waves: list[list[Step]] = []
    pending = list(steps)
    while pending:
        wave = [s for s in pending if all(src in available for _, src in s.input_map)]
        if not wave:
            missing = sorted({src for s in pending for _, src in s.input_map if src not in available})
            raise InvalidArgumentError(
                f"ensemble '{config.name}' has circular or unresolved dependencies: no step produces "
                f"{', '.join(repr(m) for m in missing)}"
            )
        for s in wave:
            pending.remove(s)
            available.update(dst for _, dst in s.output_map)
        waves.append(wave)
    return waves


class EnsembleScheduler:
    """Runs each request through the ensemble's steps on the event loop."""

    def __init__(self, model: Model, is_ready: Callable[[str, str], bool], infer: InferFn) -> None:
        """``is_ready(name, version)`` tells whether a step's model ("" version: any) can serve."""
        self._model = model
        self._infer = infer
        self._waves = plan_steps(model.config)
        self._tasks: set[asyncio.Task[None]] = set()
        for wave in self._waves:
            for step in wave:
                if not is_ready(step.model_name, step.model_version):
                    raise UnavailableError(
                        f"ensemble '{model.name}' depends on '{step.model_name}' which has no loaded version"
                    )

    def enqueue(self, request: InferRequest) -> None:
        request.t_queue_ns = time.monotonic_ns()
        task = asyncio.get_running_loop().create_task(self._run(request))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def inflight(self) -> int:
        return len(self._tasks)

    async def stop(self, timeout_s: float) -> None:
        if self._tasks:
            _done, pending = await asyncio.wait(set(self._tasks), timeout=timeout_s)
            for t in pending:
                t.cancel()

    async def _run(self, request: InferRequest) -> None:
        model = self._model
        stream = request.stream
        assert stream is not None
        t0 = time.monotonic_ns()
        try:
            outputs = await self._steps(request)
        except InferdError as e:
            model.stats.record_request(False, time.monotonic_ns() - request.t_start_ns, "OTHER")
            stream.deliver(InferResponse(model.name, model.version_str, request.id, error=e), True)
            return
        except Exception as e:
            log.exception("ensemble '%s' failed", model.name)
            err = InternalError(f"{type(e).__name__}: {e}")
            stream.deliver(InferResponse(model.name, model.version_str, request.id, error=err), True)
            return
        t1 = time.monotonic_ns()
        model.stats.record_execution(request.batch_size, 1, [0], 0, t1 - t0, 0)
        model.stats.record_request(True, t1 - request.t_start_ns)
        resp = InferResponse(model.name, model.version_str, request.id, outputs, dict(_ENSEMBLE_PARAMS))
        stream.deliver(resp, True)

    async def _steps(self, request: InferRequest) -> list[Tensor]:
        pool: dict[str, Tensor] = dict(request.inputs)
        for wave in self._waves:
            results = await asyncio.gather(*(self._step(step, request, pool) for step in wave))
            for step, resp in zip(wave, results, strict=True):
                produced = {t.name: t for t in resp.outputs}
                for src, dst in step.output_map:
                    t = produced.get(src)
                    if t is not None:
                        pool[dst] = t.renamed(dst)
        wanted = request.requested_output_names(self._model.output_names)
        missing = [n for n in wanted if n not in pool]
        if missing:
            raise InternalError(f"ensemble '{self._model.name}' did not produce output(s) {missing}")
        return [pool[n] for n in self._model.output_names if n in wanted]

    async def _step(self, step: Step, request: InferRequest, pool: dict[str, Tensor]) -> InferResponse:
        sub = InferRequest(
            model_name=step.model_name,
            model_version=step.model_version,
            inputs={dst: pool[src].renamed(dst) for dst, src in step.input_map},
            id=request.id,
            parameters=request.parameters,
            outputs=[RequestedOutput(src) for src, _ in step.output_map],
            trace=None if request.trace is None else request.trace.child(),
        )
        resp = await self._infer(sub)
        if resp.error is not None:
            raise resp.error
        return resp
