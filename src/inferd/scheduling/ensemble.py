"""Ensemble scheduler: runs the steps of an ensemble as a DAG of requests to the composing models.

Optional inputs, as the reference's ``EnsembleContext``: an optional ensemble input the request does
not bring, and a step's mapped output its response does not bring, are *absent* tensors (``None``
in a run's pool): they count as produced for the order of the steps, a step's request leaves them
out (its model must take them as optional), and the response leaves out an absent output."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor
from inferd.errors import InferdError, InternalError, InvalidArgumentError, UnavailableError

if TYPE_CHECKING:
    from inferd.engine.model import Model
    from inferd.repository.config.schema import ModelConfig

log = logging.getLogger("inferd.ensemble")

#: queues a step's request; its responses go to the callback on the loop (ServerCore.submit_step)
SubmitFn = Callable[[InferRequest, Callable[[InferResponse | None, bool], None]], None]
#: Triton 2.51 puts these parameters on every ensemble response.
_ENSEMBLE_PARAMS = {"sequence_id": 0, "sequence_start": False, "sequence_end": False}


@dataclass(slots=True, frozen=True)
class Step:
    """One ensemble step: model, version ("" = latest) and tensor maps (step name -> ensemble name)."""

    model_name: str
    model_version: str
    input_map: tuple[tuple[str, str], ...]
    output_map: tuple[tuple[str, str], ...]


def plan_steps(config: ModelConfig) -> list[list[Step]]:
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
    """Runs each request through the ensemble's steps, on the event loop, with callbacks: no task,
    future or gather per request or step (they cost more than the steps of a light ensemble)."""

    def __init__(
        self,
        model: Model,
        is_ready: Callable[[str, str], bool],
        submit: SubmitFn,
        resolve: Callable[[str], str] | None = None,
    ) -> None:
        """``is_ready(name, version)`` tells whether a step's model ("" version: any) can serve;
        ``submit(request, callback)`` queues a step's request, its responses going to ``callback``;
        ``resolve(name)`` (``--model-namespacing``) names the model a step's request goes to, asked
        at each request: the model of the ensemble's namespace, or another repository's while its
        own is away (engine/lifecycle.py ``step_key``)."""
        self._model = model
        self._submit = submit
        self._resolve = resolve
        self._waves = plan_steps(model.config)
        #: the optional ensemble inputs, absent from a run's pool when the request leaves them out
        self._optional = tuple(i.name for i in model.config.input if i.optional)
        self._runs: set[_Run] = set()
        for wave in self._waves:
            for step in wave:
                target = step.model_name if resolve is None else resolve(step.model_name)
                if not is_ready(target, step.model_version):
                    raise UnavailableError(
                        f"ensemble '{model.name}' depends on '{step.model_name}' which has no loaded version"
                    )

    def enqueue(self, request: InferRequest) -> None:
        request.t_queue_ns = time.monotonic_ns()
        run = _Run(self, request)
        self._runs.add(run)
        run.next_wave()

    def inflight(self) -> int:
        return len(self._runs)

    async def stop(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while self._runs and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


class _Run:
    """One request going through the waves: a wave's steps are submitted together, the next wave
    starts when the last of them answers."""

    __slots__ = ("done", "pool", "request", "sched", "t0", "waiting", "wave")

    def __init__(self, sched: EnsembleScheduler, request: InferRequest) -> None:
        self.sched = sched
        self.request = request
        #: the run's tensors by ensemble name; None: absent (see the module docstring)
        self.pool: dict[str, Tensor | None] = dict(request.inputs)
        for name in sched._optional:
            self.pool.setdefault(name, None)
        self.wave = 0
        self.waiting = 0
        self.done = False
        self.t0 = time.monotonic_ns()

    def next_wave(self) -> None:
        waves = self.sched._waves
        if self.wave == len(waves):
            self._finish()
            return
        wave = waves[self.wave]
        self.wave += 1
        self.waiting = len(wave)
        for step in wave:
            if self.done:  # an earlier step of this wave was refused
                return
            self._start(step)

    def _start(self, step: Step) -> None:
        request, pool = self.request, self.pool
        answered = False

        def on_response(resp: InferResponse | None, final: bool) -> None:
            nonlocal answered
            if answered:  # a decoupled step's later responses: the ensemble takes its first
                return
            if resp is None:
                if final:
                    answered = True
                    self._fail(InternalError("model produced no response"))
                return
            answered = True
            if resp.error is not None:
                self._fail(resp.error)
            else:
                self._step_done(step, resp)

        try:
            resolve = self.sched._resolve
            sub = InferRequest(
                model_name=step.model_name if resolve is None else resolve(step.model_name),
                model_version=step.model_version,
                inputs={dst: t.renamed(dst) for dst, src in step.input_map if (t := pool[src]) is not None},
                id=request.id,
                parameters=request.parameters,
                outputs=[RequestedOutput(src) for src, _ in step.output_map],
                trace=None if request.trace is None else request.trace.child(),
            )
            self.sched._submit(sub, on_response)
        except InferdError as e:
            answered = True
            self._fail(e)
        except Exception as e:
            answered = True
            log.exception("ensemble '%s' failed", self.sched._model.name)
            self._fail(InternalError(f"{type(e).__name__}: {e}"))

    def _step_done(self, step: Step, resp: InferResponse) -> None:
        if self.done:
            return
        produced = {t.name: t for t in resp.outputs}
        for src, dst in step.output_map:
            t = produced.get(src)
            self.pool[dst] = None if t is None else t.renamed(dst)
        self.waiting -= 1
        if self.waiting == 0:
            self.next_wave()

    def _fail(self, error: InferdError) -> None:
        if self.done:
            return
        self._close()
        model, request = self.sched._model, self.request
        model.stats.record_request(False, time.monotonic_ns() - request.t_start_ns, "OTHER")
        stream = request.stream
        assert stream is not None
        stream.deliver(InferResponse(model.name, model.version_str, request.id, error=error), True)

    def _close(self) -> None:
        self.done = True
        self.sched._runs.discard(self)

    def _finish(self) -> None:
        model, request, pool = self.sched._model, self.request, self.pool
        wanted = request.requested_output_names(model.output_names)
        missing = [n for n in wanted if n not in pool]
        if missing:
            self._fail(InternalError(f"ensemble '{model.name}' did not produce output(s) {missing}"))
            return
        self._close()
        outputs = [t for n in model.output_names if n in wanted and (t := pool[n]) is not None]
        t1 = time.monotonic_ns()
        model.stats.record_execution(request.batch_size, 1, [0], 0, t1 - self.t0, 0)
        model.stats.record_request(True, t1 - request.t_start_ns)
        resp = InferResponse(model.name, model.version_str, request.id, outputs, dict(_ENSEMBLE_PARAMS))
        stream = request.stream
        assert stream is not None
        stream.deliver(resp, True)
