"""The options in typed parts (server_config.py): parsed once, defaults as ServerOptions', frozen, and
the Runtime handing each component its own part and per-server state (watchdog, log switches)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from pathlib import Path

import pytest

from inferd.errors import InvalidArgumentError
from inferd.logs import VERBOSE1, LogSettings
from inferd.options import ServerOptions
from inferd.runtime import Runtime
from inferd.scheduling.watchdog import Watchdog
from inferd.server_config import (
    BackendsConfig,
    CoreConfig,
    GrpcConfig,
    LogConfig,
    ModelControlConfig,
    ServerConfig,
)


def test_each_parts_defaults_are_the_options_defaults() -> None:
    """A part built without options (a test's, an embedder's) serves as ``inferd serve`` would."""
    options = ServerOptions()
    assert GrpcConfig() == GrpcConfig.from_options(options)
    assert LogConfig() == LogConfig.from_options(options)
    assert BackendsConfig() == BackendsConfig.from_options(options)
    assert ModelControlConfig(()) == ModelControlConfig.from_options(options)
    assert CoreConfig(ModelControlConfig(())) == CoreConfig.from_options(options)


def test_flag_strings_are_parsed_into_the_parts() -> None:
    config = ServerConfig.from_options(
        ServerOptions(
            model_repository=[Path("/m")],
            model_control_mode="explicit",
            model_memory_budget="2MiB",
            backend_config=["python,execution-mode=process", "default-max-batch-size=8"],
            cache_config=["local,size=1048576"],
            metrics_config=["summary_latencies=true", "summary_quantiles=0.5:0.05"],
            grpc_use_ssl_mutual=True,
            http_header_timeout_secs=7.0,
            log_verbose=2,
        )
    )
    core = config.core
    assert core.control.repositories == (Path("/m"),) and core.control.memory_budget == 2 << 20
    assert dict(core.backends.settings["python"]) == {"execution-mode": "process"}
    assert core.backends.default_max_batch_size == 8
    assert core.cache_bytes == 1 << 20
    assert core.metrics.summary_latencies and core.metrics.quantiles == (0.5,)
    assert core.metrics.response_cache  # the server has a cache: its models' cache summaries
    assert config.grpc.use_ssl and config.grpc.preface_timeout_s == 7.0
    assert config.logs.verbose == 2


def test_parts_are_read_only() -> None:
    config = ServerConfig.from_options(ServerOptions(backend_config=["python,a=b"]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.core.id = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        config.core.backends.settings["python"]["a"] = "c"  # type: ignore[index]
    assert config.core.backends.as_dicts() == {"python": {"a": "b"}}


@pytest.mark.parametrize(
    ("options", "text"),
    [
        ({"backend_config": ["python"]}, "--backend-config option format is"),
        ({"model_memory_budget": "1GiB"}, "requires --model-control-mode=explicit"),
    ],
)
def test_a_malformed_flag_value_stops_the_server_before_it_starts(
    options: dict[str, object], text: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=text):
        Runtime(ServerOptions(model_repository=[Path("/m")], **options))  # type: ignore[arg-type]


def test_the_runtime_hands_each_component_its_part_and_its_own_state(tmp_path: Path) -> None:
    one = Runtime(ServerOptions(model_repository=[tmp_path], id="one", grpc_header_forward_pattern="^x-"))
    two = Runtime(ServerOptions(model_repository=[tmp_path], id="two"))
    assert one.core.config is one.config.core and one.core.metadata()["name"] == "one"
    assert two.core.metadata()["name"] == "two"
    assert one.grpc_servicer().config is one.config.grpc
    assert one.core.watchdog is one.watchdog and one.watchdog is not two.watchdog
    assert one.logs.requests is not two.logs.requests
    assert one.core.logs is one.logs  # its worker processes start with its own log switches


def test_a_watchdog_is_one_servers_and_its_thread_ends_with_close() -> None:
    class Pool:
        execute_timeout_ns = 10_000_000
        checked = threading.Event()

        def check_overdue(self, now_ns: int) -> None:
            self.checked.set()

    watchdog, pool = Watchdog(), Pool()
    watchdog.watch(pool)
    assert pool.checked.wait(5)
    thread = watchdog._thread
    assert thread is not None and watchdog.running()
    watchdog.close()
    thread.join(5)
    assert not thread.is_alive() and not watchdog.running()


def test_two_servers_log_switches_are_their_own() -> None:
    """Each server's request logging is its own; the ``inferd`` logger (the process's) passes the most
    verbose live server's lines, and follows when that server's switches close."""
    logger = logging.getLogger("inferd")
    quiet = LogSettings(verbose=0, attach=False)
    loud = LogSettings(verbose=1, attach=False)
    try:
        assert loud.requests.on and not quiet.requests.on
        assert logger.getEffectiveLevel() == VERBOSE1
        quiet.set_verbose(0)  # a later change of the quiet one does not silence the loud one
        assert logger.getEffectiveLevel() == VERBOSE1
        loud.close()
        assert logger.getEffectiveLevel() == logging.INFO
    finally:
        loud.close()
        quiet.close()
