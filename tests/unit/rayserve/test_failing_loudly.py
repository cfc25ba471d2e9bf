"""``inferd serve-ray`` failing loudly (issue 28), the parts that need no cluster: Serve's two
per-request settings as flags, the proxies' comparison, and a replica's health check (the server's
readiness) on a stand-in core."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from inferd.cli import build_parser
from inferd.engine.server import ServerCore
from inferd.rayserve.deploy import SEPARATE_THREAD_ENV, deployment_options, proxy_mismatch
from inferd.rayserve.replica import NO_MODELS, NOT_READY, unready


def _args(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve-ray", "--model-repository=s3://b/p", *flags])


def test_serve_settings_default_to_the_cheaper_ones() -> None:
    out = deployment_options(_args())
    assert out["ray_actor_options"]["runtime_env"]["env_vars"][SEPARATE_THREAD_ENV] == "0"
    assert out["logging_config"] == {"enable_access_log": False}


def test_serve_settings_as_flags() -> None:
    out = deployment_options(_args("--run-user-code-in-separate-thread", "--access-log=true"))
    assert out["ray_actor_options"]["runtime_env"]["env_vars"][SEPARATE_THREAD_ENV] == "1"
    assert out["logging_config"] == {"enable_access_log": True}
    with pytest.raises(SystemExit):
        _args("--access-log=maybe")


def test_google_store_variables_reach_the_replicas(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", "/keys/sa.json")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    env = deployment_options(_args())["ray_actor_options"]["runtime_env"]["env_vars"]
    assert env["GOOGLE_APPLICATION_CREDENTIALS"] == "/keys/sa.json"
    assert env["STORAGE_EMULATOR_HOST"] == "http://127.0.0.1:9"


def test_a_deploy_timeout_must_be_positive() -> None:
    assert deployment_options(_args())["num_replicas"] == 1  # the default timeout is accepted
    with pytest.raises(ValueError, match="--deploy-timeout-s"):
        deployment_options(_args("--deploy-timeout-s=0"))


def test_proxies_that_differ_are_named() -> None:
    running = ("127.0.0.1", 8100, 8101, "HeadOnly")
    assert proxy_mismatch(running, running) is None
    assert proxy_mismatch(running, ("127.0.0.1", 8100, None, "HeadOnly")) is None  # no gRPC asked
    moved = proxy_mismatch(running, ("127.0.0.1", 9100, 8101, "HeadOnly"))
    assert moved is not None
    assert "HTTP at 127.0.0.1:8100, gRPC at port 8101, proxies HeadOnly" in moved
    assert "asked for HTTP at 127.0.0.1:9100" in moved
    # a Serve whose gRPC proxy lacks inferd's service, or whose proxies run elsewhere
    assert proxy_mismatch(("127.0.0.1", 8100, None, "HeadOnly"), running) is not None
    assert proxy_mismatch(running, ("127.0.0.1", 8100, 8101, "EveryNode")) is not None


@dataclass
class _Core:
    """What ``unready`` reads of a ServerCore."""

    is_live: bool = True
    strict: bool = True
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    loaded: list[str] = field(default_factory=list)
    known: list[str] = field(default_factory=list)  # in the repository, not loaded (explicit mode)

    def live(self) -> bool:
        return self.is_live

    def ready(self) -> bool:
        return self.is_live and not (self.strict and self.failures)

    def load_failures(self) -> list[tuple[str, str, str]]:
        return self.failures

    def repository_index(self, ready_only: bool = False) -> list[dict[str, str]]:
        ready = [{"name": name, "version": "1", "state": "READY"} for name in self.loaded]
        if ready_only:
            return ready
        failed = [{"name": name, "state": "UNAVAILABLE"} for name, _, _ in self.failures]
        return ready + failed + [{"name": name} for name in self.known]


def _unready(core: _Core) -> str | None:
    return unready(core)  # type: ignore[arg-type]


def test_a_replica_is_healthy_only_when_its_server_is_ready() -> None:
    assert _unready(_Core(loaded=["add_sub"])) is None
    assert _unready(_Core(known=["add_sub"])) is None  # explicit mode with nothing asked for
    # an empty repository (or an S3 prefix read while its upload had not begun): never healthy
    assert _unready(_Core()) == f"{NOT_READY}: {NO_MODELS}"
    assert _unready(_Core(is_live=False)) == f"{NOT_READY}: its core is not live"
    unreadable = _Core(
        failures=[("s3://m/r", "", "failed to read model repository 's3://m/r': no credentials")]
    )
    assert _unready(unreadable) == (
        f"{NOT_READY}: 's3://m/r': failed to read model repository 's3://m/r': no credentials"
    )
    broken = _Core(failures=[("add_sub", "1", "bad config")], loaded=["other"])
    assert _unready(broken) == f"{NOT_READY}: 'add_sub' version 1: bad config"


def test_without_strict_readiness_a_replica_needs_one_model() -> None:
    some = _Core(strict=False, failures=[("add_sub", "1", "bad config")], loaded=["other"])
    assert _unready(some) is None
    none = _Core(strict=False, failures=[("add_sub", "1", "bad config")])
    assert _unready(none) == f"{NOT_READY}: 'add_sub' version 1: bad config"


def test_the_stand_in_has_the_cores_methods() -> None:
    for name in ("live", "ready", "load_failures", "repository_index"):
        assert callable(getattr(ServerCore, name))
