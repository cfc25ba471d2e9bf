"""A small backend for the engine's tests: the engine takes its backend lookup as a dependency
(``LoadSettings.backends``), so its load, unload, reload and failure paths run without the Python
backend. Its instances echo ``INPUT0`` as ``OUTPUT0``; what it was asked is recorded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferd.backends.base import Backend, BackendInstance, InstanceSpec, LoadContext
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.errors import InternalError, InvalidArgumentError

CONFIG = """
name: "{name}"
backend: "fake"
max_batch_size: 0
input [ {{ name: "INPUT0" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 2 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count} }} ]
{extra}
"""


def write_model(
    repo: Path, name: str, versions: tuple[int, ...] = (1,), count: int = 1, extra: str = ""
) -> Path:
    """A model folder of the fake backend in ``repo``."""
    folder = repo / name
    for v in versions:
        (folder / str(v)).mkdir(parents=True, exist_ok=True)
    (folder / "config.pbtxt").write_text(CONFIG.format(name=name, count=count, extra=extra))
    return folder


class FakeInstance:
    inline_ok = False
    uses_bls = False
    last_timings = None

    def __init__(self, backend: FakeBackend, name: str, spec: InstanceSpec) -> None:
        self.backend, self.key = backend, f"{name}/{spec.name}"

    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        return [
            InferResponse(r.model_name, r.model_version, r.id, [r.inputs["INPUT0"].renamed("OUTPUT0")])
            for r in requests
        ]

    def unload(self) -> None:
        self.backend.live.discard(self.key)


class FakeModel:
    def __init__(self, backend: FakeBackend, ctx: LoadContext) -> None:
        self.backend, self.ctx = backend, ctx

    def create_instance(self, spec: InstanceSpec) -> BackendInstance:
        key = f"{self.ctx.model_name}:{self.ctx.version}/{spec.name}"
        if key in self.backend.fail_instance:
            raise InternalError(f"instance {spec.name} failed")
        self.backend.live.add(f"{self.ctx.model_name}:{self.ctx.version}/{spec.name}")
        return FakeInstance(self.backend, f"{self.ctx.model_name}:{self.ctx.version}", spec)

    def promotion(self) -> None:
        return None

    def unload(self) -> None:
        return None


class FakeBackend:
    """A ``Backend``: ``fail_load`` (model name -> message) refuses loads, ``fail_instance``
    ("<model>:<version>/<instance>") refuses an instance; ``live`` holds the instances not unloaded."""

    name = "fake"

    def __init__(self) -> None:
        self.fail_load: dict[str, str] = {}
        self.fail_instance: set[str] = set()
        self.loads: list[tuple[str, int]] = []
        self.live: set[str] = set()

    def auto_complete(
        self, config: Any, model_dir: Path, version_dir: Path | None, *, default_max_batch_size: int = 4
    ) -> None:
        return None

    def load(self, ctx: LoadContext) -> FakeModel:
        self.loads.append((ctx.model_name, ctx.version))
        message = self.fail_load.get(ctx.model_name)
        if message is not None:
            raise InvalidArgumentError(message)
        return FakeModel(self, ctx)


class FakeBackends:
    """The lookup (``BackendLookup``): every model's backend is ``backend``, never on a GPU."""

    def __init__(self, backend: FakeBackend) -> None:
        self.backend = backend

    def backend_for(self, config: Any) -> Backend:
        return self.backend

    def auto_gpu(self, cfg: Any, have_gpus: bool) -> bool:
        return False
