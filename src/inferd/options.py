"""ServerOptions: where every CLI flag and in-process option lands, each with its help and default.

``inferd serve``'s flags are generated from these fields (``cli.build_parser``): a field's flag is
its name with dashes (tritonserver's flag names), its help is ``metadata["help"]``, and its
default is written here once (``--help`` shows it: ``metadata["default_text"]`` says it in words where
the value alone would not). ``FLAG_GROUPS`` puts the flags under their topics in ``--help``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inferd.gpu.devices import MIN_COMPUTE_CAPABILITY

#: where SageMaker puts a multi-model endpoint's models
SAGEMAKER_MODELS = Path("/opt/ml/models")


def option(default: Any, help: str, **cli: Any) -> Any:
    """A field with its CLI help; ``cli`` may hold ``flags`` (aliases), ``choices`` (``any_case``:
    matched in any case), ``metavar``, ``default_text`` and ``cli=False``."""
    return field(default=default, metadata={"help": help, **cli})


@dataclass(slots=True)
class ServerOptions:
    """Options of one server; names follow tritonserver's flags."""

    model_repository: list[Path] = field(
        default_factory=list,
        metadata={
            "help": "a model repository: a folder, s3://bucket/path (or s3://host:port/bucket/path) or "
            "as://account/container/path, fetched into a local cache",
            "flags": ("--model-repository", "--model-store"),
            "required": True,
        },
    )
    id: str = option("triton", "the server's name in the server metadata")
    model_control_mode: str = option(
        "none",
        "how models are loaded: 'none' every model at start; 'explicit' those of --load-model, then "
        "the repository API loads and unloads; 'poll' every model, then the repository's changes",
        choices=("none", "poll", "explicit"),
        any_case=True,  # as tritonserver, which lowers it (Triton's qa passes POLL and EXPLICIT)
    )
    load_model: list[str] = field(
        default_factory=list,
        metadata={"help": "a model to load at start in explicit mode ('*': all)", "metavar": "MODEL"},
    )
    repository_poll_secs: int = option(15, "seconds between two looks at the repositories in poll mode")
    model_memory_budget: str | None = option(
        None,
        "explicit mode: load a model on its first request and unload the least recently used idle "
        "models to keep their memory under this size (bytes, or with B/KiB/MiB/GiB, e.g. 2GiB)",
        metavar="SIZE",
    )
    strict_model_config: bool = option(
        False,
        "use config.pbtxt as written: no auto-completion from the model files",
        flags=("--strict-model-config", "--disable-auto-complete-config"),
    )
    strict_readiness: bool = option(
        True, "ready only when every model loaded (false: ready once the server is live)"
    )
    exit_on_error: bool = option(True, "exit at start when a model fails to load")
    exit_timeout_secs: int = option(
        30,
        "seconds after SIGTERM/SIGINT for the requests and sequences under way on the open connections "
        "(new ones are refused); then what is left is answered UNAVAILABLE and the process exits",
    )
    model_load_thread_count: int = option(4, "models loaded in parallel at start")
    model_load_timeout_secs: float = option(
        600.0,
        "seconds one model version may take to load (initialize included); past it the model is "
        "UNAVAILABLE and the others serve; 0: no limit",
    )
    model_load_retry_count: int = option(
        0,
        "times a model version whose load failed is loaded again before it is UNAVAILABLE (all tries "
        "within --model-load-timeout-secs)",
    )
    model_upload_max_bytes: int = option(
        1 << 30,
        "bytes of model files that clients may have uploaded (repository loads with file: overrides) and "
        "the server holds at once: a load past it is refused (400) until an uploaded model is unloaded; "
        "0: no limit",
    )
    model_namespacing: bool = option(
        False,
        "tritonserver's model namespaces: accepted; a model name held by two repositories is then "
        "UNAVAILABLE with a reason saying that inferd serves one model per name (without it, as the reference: "
        "'model appears in two or more repositories')",
    )
    model_execute_timeout_secs: float = option(
        0.0,
        "seconds one execute of a model may take; past it its requests fail UNAVAILABLE and a process "
        "instance restarts (a model's execute_timeout_secs parameter overrides it); 0: no limit",
    )
    rate_limit: str = option(
        "off",
        "'execution_count': an instance executes only when the resources its instance_group's rate_limiter "
        "asks for are free, instances taking turns by priority; 'off': rate_limiter settings are ignored",
    )
    rate_limit_resource: list[str] = field(
        default_factory=list,
        metadata={
            "help": "<name>:<count>[:<device>]: how many of a resource the server has (per device, or on "
            "that device; a global resource takes the largest count given)",
            "default_text": "the most any instance asks for",
        },
    )
    model_config_name: str | None = option(
        None, "read this file of each model folder instead of config.pbtxt (when it exists)", metavar="NAME"
    )
    min_supported_compute_capability: float = option(
        MIN_COMPUTE_CAPABILITY,
        "the GPUs model instances may use (KIND_GPU, KIND_AUTO): those of at least this CUDA compute "
        "capability, found through NVML (the gpu extra); without one every instance runs on the CPU",
        metavar="MAJOR.MINOR",
        default_text=f"{MIN_COMPUTE_CAPABILITY}",
    )
    backend_config: list[str] = field(
        default_factory=list,
        metadata={
            "help": "<backend>,<setting>=<value> (or <setting>=<value> for every backend), tritonserver's "
            "syntax: e.g. python,execution-mode=process, python,memory-limit-bytes=N, "
            "default-max-batch-size=8, uploaded-memory-limit-bytes=N (each worker of a model a client "
            "uploaded; 2 GiB by default, 0: none)"
        },
    )
    backend_directory: str = option(
        "/opt/tritonserver/backends",
        "where Triton C/C++ backends are looked for after the model's version folder and folder: "
        "<dir>/<backend>/libtriton_<backend>.so (the reference's default); else <dir>/<backend>/model.py "
        "makes <backend> a Python-based backend",
        metavar="DIR",
    )
    default_max_batch_size: int = option(
        4,
        "max_batch_size given to a batching model whose config leaves it out (the reference's "
        "--backend-config=default-max-batch-size)",
        cli=False,
    )
    log_verbose: int = option(
        0,
        "verbose logging: 1 adds model load steps with timings, every failed request with its reason and a "
        "line per request once answered; 2 each request as it arrives and transport details",
    )
    log_file: str | None = option(None, "write the log to this file instead of stderr", metavar="FILE")
    log_format: str = option(
        "default",
        "log line format: default (tritonserver's), ISO8601, or json (one object a line, for log shippers)",
        choices=("default", "ISO8601", "json"),
    )
    log_info: bool = option(True, "log INFO lines (and verbose ones)")
    log_warning: bool = option(True, "log WARNING lines")
    log_error: bool = option(True, "log ERROR lines")
    trace_config: list[str] = field(
        default_factory=list,
        metadata={
            "help": "[<mode>,]<setting>=<value>, tritonserver's syntax: level=OFF|TIMESTAMPS|TENSORS, "
            "rate=N (every N-th request), count=N (-1: no limit), mode=triton|opentelemetry; triton,file=PATH, "
            "triton,log-frequency=N; opentelemetry,url=HOST:PORT/v1/traces, opentelemetry,resource=KEY=VALUE, "
            "opentelemetry,bsp_max_queue_size|bsp_schedule_delay|bsp_max_export_batch_size=N "
            "(opentelemetry needs inferd[otel])"
        },
    )
    cache_config: list[str] = field(
        default_factory=list,
        metadata={
            "help": "<cache>,<setting>=<value>, tritonserver's syntax: local,size=N turns the response cache on "
            "with N bytes (models opt in with response_cache { enable: true })"
        },
    )
    response_cache_byte_size: str | None = option(
        None, "DEPRECATED: Please use --cache-config instead (--cache-config local,size=N)", metavar="N"
    )
    # frontends
    allow_http: bool = option(True, "serve the HTTP/REST API")
    http_address: str = option("0.0.0.0", "address the HTTP API listens on", metavar="ADDRESS")
    http_port: int = option(8000, "port of the HTTP API (0: any free port)")
    http_ssl_cert: str | None = option(
        None, "PEM certificate: serve HTTP (and metrics) over TLS (with --http-ssl-key)", metavar="FILE"
    )
    http_ssl_key: str | None = option(None, "PEM private key of --http-ssl-cert", metavar="FILE")
    http_ssl_root_cert: str | None = option(
        None,
        "PEM CA certificate: HTTPS clients must present a certificate it signed (mutual TLS)",
        metavar="FILE",
    )
    http_max_input_size: int = option(
        1 << 26, "bytes: the largest HTTP request body, before and after decompression (413 / 400 over it)"
    )
    http_max_url_size: int = option(16384, "bytes: the longest request URL (414 over it)")
    http_max_header_size: int = option(65536, "bytes: all header fields of a request together (431 over it)")
    http_max_header_count: int = option(100, "header fields of one request (431 over it)")
    openai_max_prompts: int = option(
        256, "prompts in one /v1/completions request, each a model request (400 over it)"
    )
    openai_max_messages: int = option(2048, "messages in one /v1/chat/completions request (400 over it)")
    openai_max_embedding_inputs: int = option(
        2048, "texts in one /v1/embeddings request (OpenAI's own limit; 400 over it)"
    )
    openai_max_stop_sequences: int = option(
        16,
        "stop sequences in one completions or chat request, each matched against every token (400 over it)",
    )
    http_header_timeout_secs: float = option(
        30.0,
        "seconds a request may take to send its headers (408 and close after: slowloris), and a gRPC "
        "client its connection preface; 0: no limit",
    )
    http_idle_timeout_secs: float = option(
        300.0, "seconds an idle keep-alive connection (or a stalled body) is kept open; 0: no limit"
    )
    http_restricted_api: list[str] = field(
        default_factory=list,
        metadata={
            "help": "<categories>:<header>=<value>: those API categories (health, metadata, inference, "
            "shared-memory, model-config, model-repository, statistics, trace, logging) answer 403 unless "
            "the request carries the header with that value (the reference's flag)"
        },
    )
    grpc_restricted_protocol: list[str] = field(
        default_factory=list,
        metadata={
            "help": "<categories>:<key>=<value>: those gRPC categories answer UNAVAILABLE unless the call's "
            "metadata has triton-grpc-protocol-<key> with that value (the reference's flag)"
        },
    )
    api_keys_file: Path | None = field(
        default=None,
        metadata={
            "help": "a file of API keys, one per line as '<key>: <categories>' ('all' for every category); "
            "requests then need 'Authorization: Bearer <key>' (HTTP, and gRPC metadata). Keys may also come "
            "from $INFERD_API_KEYS; never put one on the command line"
        },
    )
    api_keys_exempt: str = option(
        "health", "API categories open without a key when API keys are on (comma-separated, or '')"
    )
    allow_client_shm: bool = option(
        True,
        "let clients register system shared memory (2.51 behaviour; newer reference releases default to "
        "false: turn it off when clients do not share the host)",
    )
    workers: int = option(
        1,
        "serving processes sharing the HTTP, gRPC and metrics ports (SO_REUSEPORT), each with every "
        "model loaded; statistics, metrics and model control are the whole server's (inferd serve only)",
    )
    max_connections: int = option(10000, "open connections per port; the ones over get 503 and are closed")
    max_unsent_bytes: int | None = option(
        None,
        "bytes of answers produced and not yet read by their clients, in the whole server process, HTTP "
        "and gRPC together (what a connection's transport holds past 64 KiB, pipelined HTTP answers waiting "
        "for an earlier one, HTTP/2 data waiting for the client's window, decoupled streams' unread "
        "responses); past it a connection that holds unread answers takes no new request (HTTP stops "
        "reading it, gRPC answers UNAVAILABLE) and a large answer for it is refused (503 / UNAVAILABLE), "
        "past twice it for any connection; --workers share it out; 0: no bound",
        default_text="a sixteenth of the memory, RAM or the cgroup's limit, within 64 MiB and 4 GiB",
    )
    stream_max_unread_bytes: int = option(
        16 << 20,
        "bytes of a streamed request's responses (a decoupled model's: SSE, gRPC stream) that may wait for "
        "a client reading slower than the model sends; past it the model's send waits (each response "
        "counts its tensors plus 1 KiB)",
    )
    stream_stall_timeout_secs: float = option(
        60.0,
        "seconds a model's send may wait for a client that reads none of its responses; past it the request "
        "is cancelled and its stream ends with an error; 0: wait while the client stays connected",
    )
    allow_grpc: bool = option(True, "serve the gRPC API")
    grpc_address: str = option("0.0.0.0", "address the gRPC API listens on", metavar="ADDRESS")
    grpc_port: int = option(8001, "port of the gRPC API (0: any free port)")
    reuse_grpc_port: bool = option(False, "let several servers share the gRPC port (SO_REUSEPORT)")
    reuse_http_port: bool = option(False, "let several servers share the HTTP port (SO_REUSEPORT)")
    grpc_header_forward_pattern: str = option(
        "",
        "gRPC metadata whose key matches this regular expression reaches models as parameters",
        metavar="REGEX",
    )
    http_header_forward_pattern: str = option(
        "",
        "HTTP headers whose name matches this regular expression reach models as parameters (case-insensitive)",
        metavar="REGEX",
    )
    grpc_infer_response_compression_level: str = option(
        "none",
        "compression of gRPC inference responses (served by grpc.aio)",
        choices=("none", "low", "medium", "high"),
    )
    grpc_max_message_size: int = option(
        1 << 26,
        "bytes: the largest gRPC request message, before and after decompression (RESOURCE_EXHAUSTED)",
    )
    grpc_max_concurrent_streams: int = option(
        256, "calls one gRPC connection may have open at once (SETTINGS_MAX_CONCURRENT_STREAMS)"
    )
    grpc_max_header_list_size: int = option(16384, "bytes: the metadata of one gRPC call")
    grpc_keepalive_time: int = option(
        7_200_000, "ms a gRPC connection may be silent before the server pings it"
    )
    grpc_keepalive_timeout: int = option(20_000, "ms to wait for a keepalive ping's answer before closing")
    grpc_keepalive_permit_without_calls: bool = option(
        False, "allow keepalive pings on connections without calls (grpc.aio)"
    )
    grpc_http2_max_pings_without_data: int = option(
        2, "pings sent without data before the server stops sending them (grpc.aio)"
    )
    grpc_http2_min_recv_ping_interval_without_data: int = option(
        300_000, "ms: the shortest interval between a client's pings without data (grpc.aio)"
    )
    grpc_http2_max_ping_strikes: int = option(
        2, "bad pings tolerated before the connection is closed (grpc.aio)"
    )
    grpc_max_connection_age: int | None = option(None, "ms a gRPC connection lives before GOAWAY")
    grpc_max_connection_age_grace: int | None = option(
        None, "ms the calls of a connection past its age may still take"
    )
    grpc_use_ssl: bool = option(False, "serve gRPC over TLS (with --grpc-server-cert and --grpc-server-key)")
    grpc_use_ssl_mutual: bool = option(False, "TLS with client certificates (implies --grpc-use-ssl)")
    grpc_server_cert: str | None = option(None, "PEM file of the gRPC server's certificate", metavar="FILE")
    grpc_server_key: str | None = option(None, "PEM file of the gRPC server's private key", metavar="FILE")
    grpc_root_cert: str | None = option(
        None, "PEM file of the CA that signs client certificates", metavar="FILE"
    )
    grpc_server: str = option(
        "lean",
        "gRPC implementation: lean (HTTP/2 framed on the server's loop) or aio (grpc.aio; compressed "
        "responses always use it)",
        choices=("lean", "aio"),
    )
    # the cloud platforms' container APIs (frontends/sagemaker.py, frontends/vertex.py)
    allow_sagemaker: bool = option(
        False, "serve Amazon SageMaker's container API (/ping, /invocations, multi-model /models)"
    )
    sagemaker_port: int = option(8080, "port of the SageMaker API")
    sagemaker_safe_port_range: str | None = option(
        None, "<first>-<last>: the ports every other API must listen on", metavar="RANGE"
    )
    sagemaker_models_root: Path = field(
        default=SAGEMAKER_MODELS,
        metadata={
            "help": "multi-model loads read only <root>/<hash>/model[/<subfolder>] folders under this one "
            "(beyond the reference, which loads any folder a client names)"
        },
    )
    allow_vertex_ai: bool = option(
        False,
        "serve Google Vertex AI's prediction API (AIP_HEALTH_ROUTE, AIP_PREDICT_ROUTE); AIP_MODE=PREDICTION "
        "also turns HTTP and gRPC off unless their flags say otherwise",
        default_text="true if AIP_MODE=PREDICTION, else false",
    )
    vertex_ai_port: int = option(8080, "port of the Vertex AI API", default_text="AIP_HTTP_PORT, else 8080")
    vertex_ai_default_model: str = option(
        "", "the model AIP_PREDICT_ROUTE serves", default_text="the repository's only model", metavar="MODEL"
    )
    allow_metrics: bool = option(True, "serve Prometheus metrics")
    metrics_address: str = option(
        "", "address of the metrics endpoint", default_text="--http-address", metavar="ADDRESS"
    )
    metrics_port: int = option(8002, "port of the metrics endpoint (GET /metrics)")
    allow_cpu_metrics: bool = option(
        True, "export the CPU utilization and memory gauges (nv_cpu_*) on /metrics"
    )
    allow_gpu_metrics: bool = option(
        True,
        "export the GPU gauges (nv_gpu_*, nv_energy_consumption: utilization, memory, power, energy per GPU, "
        "read through NVML) on /metrics; nothing without a GPU",
    )
    allow_status_page: bool = option(
        True, "serve the live status page at GET / (and its data at /v2/status) on the HTTP and metrics ports"
    )
    metrics_config: list[str] = field(
        default_factory=list,
        metadata={
            "help": "<setting>=<value> as tritonserver reads it: summary_latencies=true (quantiles over the "
            "last minute), summary_quantiles=0.5:0.05,0.99:0.001, counter_latencies=false"
        },
    )
    metrics_interval_ms: int = option(
        2000,
        "the CPU and memory gauges are sampled at most this often, the GPU gauges polled every half of it "
        "(milliseconds)",
    )

    def __post_init__(self) -> None:
        if self.grpc_use_ssl_mutual:
            self.grpc_use_ssl = True


#: ``inferd serve --help``'s topics, in order: (title, what they have in common, the fields' names).
#: Every field with a flag is under one topic (tests/unit/test_cli.py checks it).
FLAG_GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    (
        "repositories and model control",
        "where the models are and how they are loaded",
        (
            "model_repository",
            "model_control_mode",
            "load_model",
            "repository_poll_secs",
            "model_memory_budget",
            "model_config_name",
            "strict_model_config",
            "model_namespacing",
            "model_load_thread_count",
            "model_load_timeout_secs",
            "model_load_retry_count",
            "model_upload_max_bytes",
        ),
    ),
    (
        "server",
        "its name, readiness, processes, start and stop",
        ("id", "strict_readiness", "exit_on_error", "exit_timeout_secs", "workers"),
    ),
    (
        "scheduling and backends",
        "how models execute, and the response cache",
        (
            "backend_config",
            "backend_directory",
            "min_supported_compute_capability",
            "model_execute_timeout_secs",
            "rate_limit",
            "rate_limit_resource",
            "cache_config",
            "response_cache_byte_size",
        ),
    ),
    (
        "HTTP",
        "the HTTP/REST API (KServe v2, Triton's extensions, the OpenAI API)",
        (
            "allow_http",
            "http_address",
            "http_port",
            "reuse_http_port",
            "http_ssl_cert",
            "http_ssl_key",
            "http_ssl_root_cert",
            "http_header_forward_pattern",
        ),
    ),
    (
        "gRPC",
        "the GRPCInferenceService API",
        (
            "allow_grpc",
            "grpc_address",
            "grpc_port",
            "reuse_grpc_port",
            "grpc_server",
            "grpc_use_ssl",
            "grpc_use_ssl_mutual",
            "grpc_server_cert",
            "grpc_server_key",
            "grpc_root_cert",
            "grpc_header_forward_pattern",
            "grpc_infer_response_compression_level",
            "grpc_keepalive_time",
            "grpc_keepalive_timeout",
            "grpc_keepalive_permit_without_calls",
            "grpc_http2_max_pings_without_data",
            "grpc_http2_min_recv_ping_interval_without_data",
            "grpc_http2_max_ping_strikes",
            "grpc_max_connection_age",
            "grpc_max_connection_age_grace",
        ),
    ),
    (
        "SageMaker and Vertex AI",
        "the cloud platforms' container APIs, each on a port of its own (environment: SAGEMAKER_TRITON_*, AIP_*)",
        (
            "allow_sagemaker",
            "sagemaker_port",
            "sagemaker_safe_port_range",
            "sagemaker_models_root",
            "allow_vertex_ai",
            "vertex_ai_port",
            "vertex_ai_default_model",
        ),
    ),
    (
        "limits and timeouts",
        "what one request or client may take (each past its limit gets the error said)",
        (
            "http_max_input_size",
            "http_max_url_size",
            "http_max_header_size",
            "http_max_header_count",
            "http_header_timeout_secs",
            "http_idle_timeout_secs",
            "grpc_max_message_size",
            "grpc_max_concurrent_streams",
            "grpc_max_header_list_size",
            "max_connections",
            "max_unsent_bytes",
            "stream_max_unread_bytes",
            "stream_stall_timeout_secs",
            "openai_max_prompts",
            "openai_max_messages",
            "openai_max_embedding_inputs",
            "openai_max_stop_sequences",
        ),
    ),
    (
        "access",
        "who may call what",
        (
            "http_restricted_api",
            "grpc_restricted_protocol",
            "api_keys_file",
            "api_keys_exempt",
            "allow_client_shm",
        ),
    ),
    (
        "logging and tracing",
        "the log and request traces",
        ("log_verbose", "log_file", "log_format", "log_info", "log_warning", "log_error", "trace_config"),
    ),
    (
        "metrics and status page",
        "Prometheus metrics and the live status page",
        (
            "allow_metrics",
            "metrics_address",
            "metrics_port",
            "allow_cpu_metrics",
            "allow_gpu_metrics",
            "metrics_config",
            "metrics_interval_ms",
            "allow_status_page",
        ),
    ),
)
