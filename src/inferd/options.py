"""ServerOptions: where every CLI flag and in-process option lands."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(slots=True)
class ServerOptions:
    """Options of one server; names follow tritonserver's flags."""

    model_repository: list[Path] = field(default_factory=list)
    id: str = "triton"
    model_control_mode: str = "none"
    strict_model_config: bool = False
    strict_readiness: bool = True
    exit_on_error: bool = True
    exit_timeout_secs: int = 30
    model_load_thread_count: int = 4
    model_config_name: str | None = None
    default_max_batch_size: int = 4
    log_verbose: int = 0
    # frontends
    allow_http: bool = True
    http_address: str = "0.0.0.0"
    http_port: int = 8000
    allow_grpc: bool = True
    grpc_address: str = "0.0.0.0"
    grpc_port: int = 8001
    reuse_grpc_port: bool = False
    grpc_header_forward_pattern: str = ""
    grpc_infer_response_compression_level: str = "none"  # none | low | medium | high
    grpc_keepalive_time: int = 7_200_000  # ms
    grpc_keepalive_timeout: int = 20_000  # ms
    grpc_keepalive_permit_without_calls: bool = False
    grpc_http2_max_pings_without_data: int = 2
    grpc_http2_min_recv_ping_interval_without_data: int = 300_000  # ms
    grpc_http2_max_ping_strikes: int = 2
    grpc_max_connection_age: int | None = None  # ms
    grpc_max_connection_age_grace: int | None = None  # ms
    grpc_use_ssl: bool = False
    grpc_use_ssl_mutual: bool = False
    grpc_server_cert: str | None = None
    grpc_server_key: str | None = None
    grpc_root_cert: str | None = None
    #: lean: HTTP/2 on the server's loop (frontends/grpc/h2server.py); aio: grpc.aio (TLS always)
    grpc_server: str = "lean"
    allow_metrics: bool = True
    metrics_address: str = ""
    metrics_port: int = 8002
