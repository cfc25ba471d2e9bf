"""ModelLifecycle's transitions, and the load, unload, reload and failure paths of the engine
(Loader at start, ModelControl after it) driven with a fake backend (fake_backend.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_backend import FakeBackend, FakeBackends, write_model

from inferd.backends.base import ServerLinks
from inferd.core.request import InferRequest
from inferd.core.tensor import Tensor
from inferd.engine.lifecycle import UNLOADED, ModelLifecycle
from inferd.engine.model import Model, ModelState
from inferd.engine.model_control import ModelControl
from inferd.engine.repository_manager import Loader, LoadSettings
from inferd.engine.server import ServerCore
from inferd.errors import InferdError, InvalidArgumentError
from inferd.options import ServerOptions
from inferd.repository.config.schema import ModelConfig
from inferd.repository.remote import RepositorySet
from inferd.server_config import CoreConfig


def _version(name: str, version: int, weight: int = 0) -> Model:
    cfg = ModelConfig(name=name, backend="fake")
    if weight:
        cfg.parameters["version_weights"].string_value = f"1:{weight},2:{weight}"
    return Model(name, version, cfg, Path("/nonexistent"))


# -- the transitions -------------------------------------------------------------------------------


def test_a_registered_version_routes_once_ready_and_stops_routing_as_it_unloads() -> None:
    life = ModelLifecycle()
    v1, v2 = _version("m", 1), _version("m", 2)
    life.ready(v1)  # loaded, not registered yet: nothing routes to it
    assert v1.state is ModelState.READY and life.ready_default == {}
    life.register("m", {1: v1})
    assert life.ready_default == {"m": v1} and life.is_ready("m") and life.is_ready("m", "1")
    life.ready(v2)
    life.register("m", {2: v2})  # beside v1
    assert set(life.models["m"]) == {1, 2} and life.ready_default["m"] is v2
    life.unloading([v2])  # no new requests: the default goes back to v1 at once
    assert v2.state is ModelState.UNLOADING and life.ready_default["m"] is v1
    life.unloaded(v2)
    assert (v2.state, v2.reason) == (ModelState.UNAVAILABLE, UNLOADED)
    life.unloaded(v1)
    assert "m" not in life.ready_default and not life.is_ready("m")


def test_namespaced_keys_resolve_by_name_until_two_serve() -> None:
    from inferd.errors import NotFoundError

    life = ModelLifecycle(namespacing=True)
    a_key, b_key = "/r/a::m", "/r/b::m"
    a = Model("m", 1, ModelConfig(name="m", backend="fake"), Path("/r/a/m"), key=a_key)
    b = Model("m", 1, ModelConfig(name="m", backend="fake"), Path("/r/b/m"), key=b_key)
    with pytest.raises(InvalidArgumentError, match="Request for unknown model: 'm' is not found"):
        raise life.unknown("m")  # namespaced: the reference's INVALID_ARG for a name never listed
    life.ready(a)
    life.register(a_key, {1: a})
    assert life.ready_default["m"] is a and life.resolve("m") == a_key and life.is_ready("m")
    assert life.step_key("m", "/r/b") == "m" and life.step_key("m", "/r/a") == a_key
    life.ready(b)
    life.register(b_key, {1: b})  # two serve: the name is no alias, a request by it is refused
    assert "m" not in life.ready_default and not life.is_ready("m")
    with pytest.raises(InvalidArgumentError, match="There are 2 identifiers of model 'm' in global map"):
        life.resolve("m")
    assert life.step_key("m", "/r/b") == b_key and life.keys_of("m") == [a_key, b_key]
    life.unloading([a])
    assert life.ready_default["m"] is b  # the alias follows as a stops
    life.unloaded(a)
    life.unloaded(b)
    with pytest.raises(NotFoundError, match="Identifier of model 'm' is not found in global map"):
        life.resolve("m")
    life.forget(a_key)
    life.forget(b_key)
    assert life.keys_of("m") == ["m"] and life.models == {}


def test_without_namespacing_a_name_with_the_separator_is_only_a_name() -> None:
    life = ModelLifecycle()  # a folder named "a::b" is the model "a::b", nothing else
    m = Model("a::b", 1, ModelConfig(name="a::b", backend="fake"), Path("/r/a::b"))
    life.ready(m)
    life.register("a::b", {1: m})
    assert life.ready_default == {"a::b": m} and life.resolve("b") == "b" and not life.is_ready("b")
    assert life.name_of("a::b") == "a::b" and life.keys_of("b") == ["b"]


def test_failures_by_version_and_by_name() -> None:
    life = ModelLifecycle()
    bad = _version("m", 1)
    life.unavailable(bad, "Invalid argument: no")
    life.refused("m", "an earlier failure")
    life.list_failed("m", {1: bad})  # the failure by name stays beside the failed versions
    assert life.failed == {"m": "an earlier failure"} and life.models["m"][1].reason == "Invalid argument: no"
    good = _version("m", 1)
    life.ready(good)
    life.register("m", {1: good})  # a load that made it: the failure is forgotten
    assert life.failed == {} and life.ready_default["m"] is good
    life.refused("gone", "unreadable")
    life.forget("gone")
    life.forget("m")
    assert life.failed == {} and life.models == {} and life.ready_default == {}


def test_readers_cannot_write_a_state() -> None:
    model = _version("m", 1)
    with pytest.raises(AttributeError):
        model.state = ModelState.READY  # type: ignore[misc]
    with pytest.raises(AttributeError):
        model.reason = "no"  # type: ignore[misc]


# -- the engine with a fake backend ----------------------------------------------------------------


def _settings(backend: FakeBackend, **kw: Any) -> LoadSettings:
    async def no_steps(*_a: Any) -> None:
        raise AssertionError("no ensemble here")

    return LoadSettings(
        loop=asyncio.get_running_loop(),
        submit_step=no_steps,  # type: ignore[arg-type]
        links=ServerLinks(),
        backends=FakeBackends(backend),
        **kw,
    )


def _run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())


def test_the_start_loads_every_model_and_lists_each_failure(tmp_path: Path) -> None:
    write_model(tmp_path, "good", versions=(1, 2), extra="version_policy: { all: {} }")
    write_model(tmp_path, "refused")
    write_model(tmp_path, "half", count=2)
    (tmp_path / "no_config" / "1").mkdir(parents=True)
    (tmp_path / "no_config" / "config.pbtxt").write_text("name: ")
    backend = FakeBackend()
    backend.fail_load["refused"] = "the fake refuses it"
    backend.fail_instance.add("half:1/half_0_1")  # its second instance fails: the first is released

    async def main() -> None:
        life = ModelLifecycle()
        found = await Loader(_settings(backend), life).load_all(RepositorySet([tmp_path]))
        assert set(found) == {"good", "refused", "half", "no_config"}
        assert [m.state for m in life.models["good"].values()] == [ModelState.READY] * 2
        assert life.ready_default["good"].version == 2
        refused = life.models["refused"][1]
        assert refused.state is ModelState.UNAVAILABLE
        assert refused.reason == "Invalid argument: the fake refuses it"
        assert life.models["half"][1].reason == "Internal: instance half_0_1 failed"
        assert "no_config" in life.failed and "no_config" not in life.models
        assert backend.live == {"good:1/good_0_0", "good:2/good_0_0"}  # half's first instance released
        for m in life.all_versions():
            if m.scheduler is not None:
                await m.scheduler.stop(1)

    _run(main)


def test_model_control_loads_reloads_and_unloads(tmp_path: Path) -> None:
    write_model(tmp_path, "m", versions=(1,))
    backend = FakeBackend()

    async def main() -> None:
        life = ModelLifecycle()
        control = ModelControl("explicit", [tmp_path], Loader(_settings(backend), life), drain_timeout_s=1)
        await control.start([])
        assert life.models == {}
        await control.load("m")
        first = life.ready_default["m"]
        assert first.version == 1 and backend.loads == [("m", 1)]
        await control.load("m")  # nothing changed: nothing loads
        assert backend.loads == [("m", 1)]
        write_model(tmp_path, "m", versions=(2,))  # a new version: the latest is served
        await control.load("m")
        assert life.ready_default["m"].version == 2
        assert (first.state, first.reason) == (ModelState.UNAVAILABLE, UNLOADED)
        assert backend.live == {"m:2/m_0_0"}
        await control.unload("m")
        assert "m" not in life.ready_default and backend.live == set()
        assert life.models["m"][2].reason == UNLOADED

    _run(main)


def test_a_failed_reload_leaves_the_old_version_serving(tmp_path: Path) -> None:
    write_model(tmp_path, "m", versions=(1,))
    backend = FakeBackend()

    async def main() -> None:
        life = ModelLifecycle()
        control = ModelControl("explicit", [tmp_path], Loader(_settings(backend), life), drain_timeout_s=1)
        await control.start(["m"])
        serving = life.ready_default["m"]
        write_model(tmp_path, "m", versions=(2,))
        backend.fail_load["m"] = "broken now"
        with pytest.raises(InvalidArgumentError) as info:
            await control.load("m")
        assert info.value.message == (
            "load failed for model 'm': version 2 is at UNAVAILABLE state: Invalid argument: broken now;\n"
        )
        assert life.ready_default["m"] is serving and serving.ready and 2 not in life.models["m"]
        await control.unload("m")

    _run(main)


def test_a_model_that_never_loaded_lists_its_failed_versions(tmp_path: Path) -> None:
    write_model(tmp_path, "m", versions=(1,))
    backend = FakeBackend()
    backend.fail_load["m"] = "no"

    async def main() -> None:
        life = ModelLifecycle()
        control = ModelControl("explicit", [tmp_path], Loader(_settings(backend), life), drain_timeout_s=1)
        await control.start(["m"])  # at start the failure is logged, not raised
        assert life.models["m"][1].reason == "Invalid argument: no" and "m" not in life.ready_default
        with pytest.raises(InferdError, match="model not found in any model repository"):
            await control.load("absent")

    _run(main)


def test_the_server_core_serves_a_fake_backends_model(tmp_path: Path) -> None:
    """ServerCore takes its backend lookup too: start, a request, the index, stop."""
    write_model(tmp_path, "m")
    backend = FakeBackend()

    async def main() -> None:
        core = ServerCore(
            CoreConfig.from_options(ServerOptions(model_repository=[tmp_path])),
            backends=FakeBackends(backend),
        )
        await core.start()
        try:
            x = np.array([1.0, 2.0], np.float32)
            request = InferRequest(model_name="m", inputs={"INPUT0": Tensor.from_array("INPUT0", x)})
            response = await core.infer(request)
            assert response.error is None and response.outputs[0].array.tolist() == [1.0, 2.0]
            assert core.repository_index() == [{"name": "m", "version": "1", "state": "READY"}]
        finally:
            await core.stop(1)
        assert backend.live == set() and core.registry.models["m"][1].reason == UNLOADED

    _run(main)
