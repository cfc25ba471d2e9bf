"""The server's configuration in typed parts, parsed once from ``ServerOptions`` where the server is
composed (``inferd.runtime.Runtime``), each component handed only its own part.

``ServerOptions`` stays what users write (``inferd serve``'s flags, ``inferd.Server(...)``'s keywords);
the flag strings in it (``--backend-config``, ``--cache-config``, ``--metrics-config``,
``--model-memory-budget``) are parsed here, once, and a malformed one stops the server before anything
starts, with the reference's text. Every part is frozen: a component cannot change another's view.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from inferd.core.summary import MetricsConfig
from inferd.engine.cache import cache_size
from inferd.engine.on_demand import budget_from_options
from inferd.errors import InvalidArgumentError
from inferd.options import ServerOptions


def parse_backend_config(settings: list[str] | tuple[str, ...]) -> dict[str, dict[str, str]]:
    """``--backend-config`` values, tritonserver's syntax: ``<backend>,<setting>=<value>`` for one
    backend, ``<setting>=<value>`` for all (key ``""``)."""
    out: dict[str, dict[str, str]] = {}
    for arg in settings:
        name, comma, rest = arg.partition(",")
        if not comma:
            name, rest = "", arg
        key, eq, value = rest.partition("=")
        if not eq or not key or not value:
            raise InvalidArgumentError(
                f"--backend-config option format is '<backend name>,<setting>=<value>'. Got {arg}"
            )
        out.setdefault(name, {})[key] = value
    return out


@dataclass(frozen=True, slots=True)
class ModelControlConfig:
    """Where the models are and how they are loaded (the repository manager and model control's)."""

    repositories: tuple[Path, ...]
    mode: str = "none"
    load_models: tuple[str, ...] = ()
    poll_secs: int = 15
    #: ``--model-memory-budget`` in bytes (None: no budget; explicit mode only)
    memory_budget: int | None = None
    upload_max_bytes: int = 1 << 30
    strict_model_config: bool = False
    config_name: str | None = None
    namespacing: bool = False
    load_threads: int = 4
    load_timeout_s: float = 600.0
    load_retries: int = 0

    @classmethod
    def from_options(cls, o: ServerOptions) -> ModelControlConfig:
        return cls(
            repositories=tuple(o.model_repository),
            mode=o.model_control_mode,
            load_models=tuple(o.load_model),
            poll_secs=o.repository_poll_secs,
            memory_budget=budget_from_options(o.model_memory_budget, o.model_control_mode),
            upload_max_bytes=o.model_upload_max_bytes,
            strict_model_config=o.strict_model_config,
            config_name=o.model_config_name,
            namespacing=o.model_namespacing,
            load_threads=o.model_load_thread_count,
            load_timeout_s=o.model_load_timeout_secs,
            load_retries=o.model_load_retry_count,
        )


@dataclass(frozen=True, slots=True)
class BackendsConfig:
    """What the backends are given: ``--backend-config`` parsed, where C/C++ backends are, the GPUs
    they may use and the execute watchdog's limit."""

    #: backend name -> its settings ("" holds the ones for every backend); read-only
    settings: Mapping[str, Mapping[str, str]] = field(default_factory=lambda: MappingProxyType({}))
    directory: str = "/opt/tritonserver/backends"
    #: a batching model's max_batch_size when its config leaves it out (``default-max-batch-size``)
    default_max_batch_size: int = 4
    min_compute_capability: float = 6.0
    execute_timeout_s: float = 0.0

    @classmethod
    def from_options(cls, o: ServerOptions) -> BackendsConfig:
        parsed = parse_backend_config(o.backend_config)
        default_mbs = parsed.get("", {}).get("default-max-batch-size")
        return cls(
            settings=MappingProxyType({k: MappingProxyType(v) for k, v in parsed.items()}),
            directory=o.backend_directory,
            default_max_batch_size=int(default_mbs) if default_mbs else o.default_max_batch_size,
            min_compute_capability=o.min_supported_compute_capability,
            execute_timeout_s=o.model_execute_timeout_secs,
        )

    def as_dicts(self) -> dict[str, dict[str, str]]:
        """The settings as plain dicts (the loader's and the backends' own copy)."""
        return {k: dict(v) for k, v in self.settings.items()}


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """The core's part: its name, readiness, shutdown, streams' windows, the response cache, the
    metrics its models keep, model control and the backends."""

    control: ModelControlConfig
    backends: BackendsConfig = field(default_factory=BackendsConfig)
    id: str = "triton"
    strict_readiness: bool = True
    exit_timeout_s: float = 30.0
    status_page: bool = True
    stream_max_unread_bytes: int = 16 << 20
    stream_stall_timeout_s: float = 60.0
    #: the response cache's bytes (``--cache-config local,size=N``), None: no cache
    cache_bytes: int | None = None
    #: ``--metrics-config`` (``response_cache`` set when the server has a cache)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    #: the CPU and memory gauges on /metrics, and how often they are sampled
    cpu_metrics: bool = True
    metrics_interval_ms: int = 2000

    @classmethod
    def from_options(cls, o: ServerOptions) -> CoreConfig:
        cache = cache_size(o.cache_config, o.response_cache_byte_size)
        metrics = MetricsConfig.parse(o.metrics_config)
        return cls(
            control=ModelControlConfig.from_options(o),
            backends=BackendsConfig.from_options(o),
            id=o.id,
            strict_readiness=o.strict_readiness,
            exit_timeout_s=float(o.exit_timeout_secs),
            status_page=o.allow_status_page,
            stream_max_unread_bytes=o.stream_max_unread_bytes,
            stream_stall_timeout_s=o.stream_stall_timeout_secs,
            cache_bytes=cache,
            metrics=MetricsConfig(
                metrics.counter_latencies,
                metrics.summary_latencies,
                metrics.quantiles,
                metrics.histogram_latencies,
                response_cache=cache is not None,
            ),
            cpu_metrics=o.allow_cpu_metrics,
            metrics_interval_ms=o.metrics_interval_ms,
        )


@dataclass(frozen=True, slots=True)
class GrpcConfig:
    """The gRPC front end's part (the servicer and its transports, lean or grpc.aio)."""

    allow: bool = True
    address: str = "0.0.0.0"
    port: int = 8001
    reuse_port: bool = False
    server: str = "lean"
    use_ssl: bool = False
    use_ssl_mutual: bool = False
    server_cert: str | None = None
    server_key: str | None = None
    root_cert: str | None = None
    header_forward_pattern: str = ""
    infer_response_compression_level: str = "none"
    max_message_size: int = 1 << 26
    max_concurrent_streams: int = 256
    max_header_list_size: int = 16384
    keepalive_time_ms: int = 7_200_000
    keepalive_timeout_ms: int = 20_000
    keepalive_permit_without_calls: bool = False
    http2_max_pings_without_data: int = 2
    http2_min_recv_ping_interval_without_data_ms: int = 300_000
    http2_max_ping_strikes: int = 2
    max_connection_age_ms: int | None = None
    max_connection_age_grace_ms: int | None = None
    #: seconds a client may take to send its connection preface (``--http-header-timeout-secs``)
    preface_timeout_s: float = 30.0
    max_connections: int = 10000

    @classmethod
    def from_options(cls, o: ServerOptions) -> GrpcConfig:
        return cls(
            allow=o.allow_grpc,
            address=o.grpc_address,
            port=o.grpc_port,
            reuse_port=o.reuse_grpc_port,
            server=o.grpc_server,
            use_ssl=o.grpc_use_ssl or o.grpc_use_ssl_mutual,
            use_ssl_mutual=o.grpc_use_ssl_mutual,
            server_cert=o.grpc_server_cert,
            server_key=o.grpc_server_key,
            root_cert=o.grpc_root_cert,
            header_forward_pattern=o.grpc_header_forward_pattern,
            infer_response_compression_level=o.grpc_infer_response_compression_level,
            max_message_size=o.grpc_max_message_size,
            max_concurrent_streams=o.grpc_max_concurrent_streams,
            max_header_list_size=o.grpc_max_header_list_size,
            keepalive_time_ms=o.grpc_keepalive_time,
            keepalive_timeout_ms=o.grpc_keepalive_timeout,
            keepalive_permit_without_calls=o.grpc_keepalive_permit_without_calls,
            http2_max_pings_without_data=o.grpc_http2_max_pings_without_data,
            http2_min_recv_ping_interval_without_data_ms=o.grpc_http2_min_recv_ping_interval_without_data,
            http2_max_ping_strikes=o.grpc_http2_max_ping_strikes,
            max_connection_age_ms=o.grpc_max_connection_age,
            max_connection_age_grace_ms=o.grpc_max_connection_age_grace,
            preface_timeout_s=o.http_header_timeout_secs,
            max_connections=o.max_connections,
        )


@dataclass(frozen=True, slots=True)
class LogConfig:
    """The log switches at start (``logs.LogSettings`` holds them while the server runs)."""

    file: str | None = None
    format: str = "default"
    verbose: int = 0
    info: bool = True
    warning: bool = True
    error: bool = True

    @classmethod
    def from_options(cls, o: ServerOptions) -> LogConfig:
        return cls(o.log_file, o.log_format, o.log_verbose, o.log_info, o.log_warning, o.log_error)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Every part, parsed once (``from_options``); the Runtime hands each to its component."""

    core: CoreConfig
    grpc: GrpcConfig
    logs: LogConfig

    @classmethod
    def from_options(cls, o: ServerOptions) -> ServerConfig:
        """The parts of ``o``; InvalidArgumentError (the reference's text) for a malformed flag value."""
        return cls(
            core=CoreConfig.from_options(o), grpc=GrpcConfig.from_options(o), logs=LogConfig.from_options(o)
        )
