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
    allow_metrics: bool = True
    metrics_address: str = ""
    metrics_port: int = 8002
