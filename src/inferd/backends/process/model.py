"""``ProcessModel``: a model version, of any backend, whose instances are worker processes: its files
are read and its code runs there, never in the server's process."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import partial

from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.process.instance import ProcessInstance
from inferd.backends.process.memory import memory_limit


class ProcessModel:
    """A model whose instances are worker processes (a ``BackendModel``; each worker loads the model
    with the config's backend)."""

    def __init__(
        self,
        ctx: LoadContext,
        limit: int | None = None,
        limit_name: str = "memory_limit_bytes",
        load_deadline: float | None = None,
    ) -> None:
        """``limit``: bytes of resident memory past which a worker is killed (0: none; None: the
        model's ``memory_limit_bytes`` or the server's default, memory.py), named ``limit_name`` in
        errors; ``load_deadline``: when the instances created now must have started (monotonic
        seconds; None: each within ``ctx.load_timeout_s``)."""
        self.ctx = ctx
        self.memory_limit = memory_limit(ctx) if limit is None else limit
        self.limit_name = limit_name
        self.load_deadline = load_deadline
        self._lock = threading.Lock()
        self._live = 0
        self._instances: set[ProcessInstance] = set()

    def create_instance(self, spec: InstanceSpec) -> ProcessInstance:
        instance = ProcessInstance(
            self.ctx,
            spec,
            self.ctx.load_timeout_s,
            self.memory_limit,
            self.limit_name,
            first_deadline=self.load_deadline,
        )
        instance.on_unload = partial(self._instance_unloaded, instance)
        with self._lock:
            self._live += 1
            self._instances.add(instance)
        # the server's (its links'): their workers' memory counts in the model's (engine/on_demand.py)
        self.ctx.links.processes.add(self.ctx.model_name, instance)
        return instance

    def abort(self, reason: str) -> None:
        """Kill every worker of the model now (its load passed its deadline): what they were doing
        fails with ``reason``."""
        with self._lock:
            instances = list(self._instances)
        for instance in instances:
            instance.abort(reason)

    def is_ready(self) -> bool:
        """Every live instance's ``is_ready()`` (engine/readiness.py)."""
        with self._lock:
            instances = list(self._instances)
        return all(i.is_ready() for i in instances)

    def ready_check(self) -> Callable[[], bool] | None:
        """The model's instances' ``is_ready()``, when the model defines one."""
        with self._lock:
            defined = any(i.has_is_ready for i in self._instances)
        return self.is_ready if defined else None

    @property
    def live(self) -> int:
        """Instances created and not unloaded."""
        return self._live

    def _instance_unloaded(self, instance: ProcessInstance) -> None:
        """After the last instance, the custom metrics its processes created go (one owner for all)."""
        with self._lock:
            self._live -= 1
            last = self._live == 0
            self._instances.discard(instance)
        self.ctx.links.processes.discard(self.ctx.model_name, instance)
        metrics = self.ctx.links.metrics
        if last and metrics is not None:
            metrics.release_owner(f"{self.ctx.model_name}:{self.ctx.version}")

    def promotion(self) -> None:
        """Already processes."""
        return None

    def unload(self) -> None:
        """Nothing: each instance's ``unload`` stops its process."""
