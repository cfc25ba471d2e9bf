"""The memory budget's pieces (engine/on_demand.py): sizes, which model is unloaded to fit (least
recently used, idle, not an ensemble's busy step), one load shared by concurrent requests, a model
over the whole budget, and the readiness check's bounds (engine/readiness.py)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from inferd.engine.lifecycle import ModelLifecycle
from inferd.engine.model import Model
from inferd.engine.on_demand import (
    Evict,
    MemoryBudget,
    budget_from_options,
    files_bytes,
    parse_size,
    rss_bytes,
)
from inferd.engine.readiness import ReadinessCheck
from inferd.errors import InvalidArgumentError
from inferd.repository.config.schema import ModelConfig

MIB = 1 << 20


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("2GiB", 2 << 30),
        ("512MiB", 512 * MIB),
        ("64KiB", 64 << 10),
        ("100B", 100),
        ("4096", 4096),
        ("1.5 GiB", 3 << 29),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["2GB", "2 gib", "", "-1", "1e9", "GiB", "0", "0.1B"])
def test_sizes_refused(text: str) -> None:
    with pytest.raises(InvalidArgumentError, match="--model-memory-budget"):
        parse_size(text)


def test_the_budget_needs_explicit_mode() -> None:
    assert budget_from_options(None, "poll") is None
    assert budget_from_options("1MiB", "explicit") == MIB
    for mode in ("none", "poll"):
        with pytest.raises(InvalidArgumentError, match="requires --model-control-mode=explicit"):
            budget_from_options("1MiB", mode)


def test_rss_and_files(tmp_path: Path) -> None:
    assert rss_bytes() > 10 * MIB  # this interpreter, numpy loaded
    assert rss_bytes(2**30) == 0  # no such process
    (tmp_path / "1").mkdir()
    (tmp_path / "1" / "model.onnx").write_bytes(bytes(1000))
    (tmp_path / "config.pbtxt").write_bytes(bytes(24))
    assert files_bytes(tmp_path) == 1024


class FakeScheduler:
    def __init__(self) -> None:
        self.queued = 0

    def inflight(self) -> int:
        return self.queued

    def enqueue(self, request: object) -> None:
        raise AssertionError("not used")

    async def stop(self, timeout_s: float) -> None:
        return None


def _add(registry: ModelLifecycle, name: str, steps: tuple[str, ...] = ()) -> FakeScheduler:
    cfg = ModelConfig(name=name, backend="python")
    if steps:
        cfg = ModelConfig(name=name, platform="ensemble")
        for s in steps:
            cfg.ensemble_scheduling.step.add(model_name=s)
    m = Model(name, 1, cfg, Path("/nonexistent"))
    registry.ready(m)
    sched = FakeScheduler()
    m.scheduler = sched
    registry.register(name, {1: m})
    return sched


def _budget(registry: ModelLifecycle, sizes: dict[str, int], limit: int = 100 * MIB) -> MemoryBudget:
    budget = MemoryBudget(limit, registry, measure=lambda: 0, workers=lambda _name: 0)
    budget.sizes.update(sizes)
    for name in sizes:
        budget.touch(name)
    return budget


def _evictor(registry: ModelLifecycle, evicted: list[str]) -> Evict:
    async def evict(name: str) -> None:
        evicted.append(name)
        for m in registry.models[name].values():
            registry.unavailable(m, "")

    return evict


def test_the_least_recently_used_idle_model_goes_first() -> None:
    registry = ModelLifecycle()
    for name in ("a", "b", "c"):
        _add(registry, name)
    budget = _budget(registry, {"a": 40 * MIB, "b": 40 * MIB, "c": 40 * MIB})
    budget.touch("a")  # order now: b, c, a
    evicted: list[str] = []
    asyncio.run(budget.fit({"c"}, _evictor(registry, evicted)))
    assert evicted == ["b"]
    assert budget.used() == 80 * MIB
    assert budget.evictions == {"b": 1}
    asyncio.run(budget.fit(set(), _evictor(registry, evicted), extra=50 * MIB))
    assert evicted == ["b", "c"]  # room for 50 MiB more: c was used before a


def test_busy_models_and_the_steps_of_a_busy_ensemble_stay() -> None:
    registry = ModelLifecycle()
    busy = _add(registry, "busy")
    _add(registry, "step")
    _add(registry, "idle")
    ensemble = _add(registry, "ens", steps=("step",))
    budget = _budget(registry, {"busy": 60 * MIB, "step": 60 * MIB, "idle": 60 * MIB}, limit=50 * MIB)
    budget.touch("ens")
    busy.queued = 1
    ensemble.queued = 1
    evicted: list[str] = []
    asyncio.run(budget.fit(set(), _evictor(registry, evicted)))
    assert evicted == ["idle"]  # and the budget stays exceeded: the rest is in use (a warning)
    busy.queued = ensemble.queued = 0
    asyncio.run(budget.fit(set(), _evictor(registry, evicted)))
    assert evicted == ["idle", "busy", "step"]  # never the ensemble itself: it holds no memory


def test_a_load_is_measured_and_a_model_over_the_budget_refused() -> None:
    registry = ModelLifecycle()
    rss = [100 * MIB]
    budget = MemoryBudget(
        50 * MIB, registry, measure=lambda: rss[0], workers=lambda n: 5 * MIB if n == "w" else 0
    )
    rss[0] += 30 * MIB
    budget.loaded("m", 100 * MIB)
    assert budget.sizes["m"] == 30 * MIB
    budget.loaded("m", rss[0])  # a reload the allocator served from freed memory: the largest counts
    assert budget.sizes["m"] == 30 * MIB
    rss[0] += 46 * MIB
    with pytest.raises(InvalidArgumentError) as e:
        budget.loaded("w", rss[0] - 46 * MIB)  # 46 MiB here and 5 MiB in its worker processes
    assert e.value.message == (
        "load failed for model 'w': it needs 51.0 MiB of memory (measured when it loaded), more than "
        "the whole --model-memory-budget of 50.0 MiB"
    )


def test_concurrent_requests_share_one_load_and_a_known_giant_is_refused_without_one() -> None:
    registry = ModelLifecycle()
    budget = MemoryBudget(50 * MIB, registry, workers=lambda _name: 0)
    loads: list[str] = []

    async def main() -> None:
        gate = asyncio.Event()

        async def load(name: str) -> None:
            loads.append(name)
            await gate.wait()

        waiters = [asyncio.ensure_future(budget.ensure_loaded("m", load)) for _ in range(5)]
        await asyncio.sleep(0)
        gate.set()
        await asyncio.gather(*waiters)
        budget.sizes["giant"] = 80 * MIB
        with pytest.raises(InvalidArgumentError, match=r"'giant': it needs 80\.0 MiB"):
            await budget.ensure_loaded("giant", load)

    asyncio.run(main())
    assert loads == ["m"]


def test_metric_lines() -> None:
    registry = ModelLifecycle()
    _add(registry, "a")
    budget = _budget(registry, {"a": 3 * MIB})
    budget.evictions["b"] += 2
    lines = budget.metric_lines()
    assert f'inferd_model_memory_bytes{{model="a"}} {3 * MIB}' in lines
    assert 'inferd_model_evictions_total{model="b"} 2' in lines
    assert f"inferd_model_memory_budget_bytes {100 * MIB}" in lines


# -- engine/readiness.py -----------------------------------------------------------------------------
def test_a_readiness_check_answers_and_never_raises() -> None:
    def boom() -> bool:
        raise RuntimeError("database unreachable")

    async def main() -> list[bool]:
        return [
            await ReadinessCheck("m", lambda: True)(),
            await ReadinessCheck("m", lambda: False)(),
            await ReadinessCheck("m", boom)(),
        ]

    assert asyncio.run(main()) == [True, False, False]


def test_a_hanging_check_is_not_ready_in_time_and_callers_share_the_one_running() -> None:
    release = threading.Event()
    calls: list[int] = []

    def hang() -> bool:
        calls.append(1)
        release.wait(10)
        return True

    check = ReadinessCheck("m", hang, timeout_s=0.05)

    async def main() -> tuple[list[bool], bool]:
        answers = await asyncio.gather(check(), check(), check())
        release.set()
        await asyncio.wait_for(asyncio.shield(check._running), 10)  # type: ignore[arg-type]
        return list(answers), await check()

    answers, after = asyncio.run(main())
    assert answers == [False, False, False]
    assert after is True
    assert len(calls) == 2  # one for the three that waited, one after it ended
