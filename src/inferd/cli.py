"""``inferd serve``: tritonserver's flags -> ServerOptions; runs the server and its frontends."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from inferd import __version__
from inferd.errors import InferdError
from inferd.options import ServerOptions

log = logging.getLogger("inferd")


class TritonFormatter(logging.Formatter):
    """``I1121 22:25:21.857837 8959 file.py:13] message`` as tritonserver logs."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created)
        sev = record.levelname[0] if record.levelname != "DEBUG" else "I"
        msg = record.getMessage()
        if record.exc_info:
            msg += "\n" + self.formatException(record.exc_info)
        return f"{sev}{ts:%m%d %H:%M:%S.%f} {record.process} {record.filename}:{record.lineno}] {msg}"


def setup_logging(verbose: int) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TritonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.DEBUG if verbose > 0 else logging.INFO)


def _bool(text: str) -> bool:
    v = text.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value '{text}' (use true/false/1/0)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="inferd", description="A Triton-compatible inference server.")
    p.add_argument("--version", action="version", version=f"inferd {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="serve model repositories (tritonserver's flags)")
    b = {"type": _bool, "nargs": "?", "const": True}
    s.add_argument(
        "--model-repository", "--model-store", action="append", default=[], required=True, type=Path
    )
    s.add_argument("--id", default="triton", help="server name in metadata (default: triton)")
    s.add_argument("--model-control-mode", default="none", choices=["none"], help="only 'none' so far")
    s.add_argument("--strict-model-config", default=False, **b)  # type: ignore[arg-type]
    s.add_argument("--disable-auto-complete-config", default=False, **b)  # type: ignore[arg-type]
    s.add_argument("--strict-readiness", default=True, **b)  # type: ignore[arg-type]
    s.add_argument("--exit-on-error", default=True, **b)  # type: ignore[arg-type]
    s.add_argument("--exit-timeout-secs", default=30, type=int)
    s.add_argument("--model-load-thread-count", default=4, type=int)
    s.add_argument("--model-config-name", default=None)
    s.add_argument("--log-verbose", default=0, type=int)
    s.add_argument("--allow-http", default=True, **b)  # type: ignore[arg-type]
    s.add_argument("--http-address", default="0.0.0.0")
    s.add_argument("--http-port", default=8000, type=int)
    s.add_argument("--allow-grpc", default=True, **b)  # type: ignore[arg-type]
    s.add_argument("--grpc-address", default="0.0.0.0")
    s.add_argument("--grpc-port", default=8001, type=int)
    s.add_argument("--reuse-grpc-port", default=False, **b)  # type: ignore[arg-type]
    s.add_argument("--grpc-header-forward-pattern", default="")
    s.add_argument(
        "--grpc-infer-response-compression-level", default="none", choices=["none", "low", "medium", "high"]
    )
    s.add_argument("--grpc-keepalive-time", default=7_200_000, type=int)
    s.add_argument("--grpc-keepalive-timeout", default=20_000, type=int)
    s.add_argument("--grpc-keepalive-permit-without-calls", default=False, **b)  # type: ignore[arg-type]
    s.add_argument("--grpc-http2-max-pings-without-data", default=2, type=int)
    s.add_argument("--grpc-http2-min-recv-ping-interval-without-data", default=300_000, type=int)
    s.add_argument("--grpc-http2-max-ping-strikes", default=2, type=int)
    s.add_argument("--grpc-max-connection-age", default=None, type=int)
    s.add_argument("--grpc-max-connection-age-grace", default=None, type=int)
    s.add_argument("--grpc-use-ssl", default=False, **b)  # type: ignore[arg-type]
    s.add_argument("--grpc-use-ssl-mutual", default=False, **b)  # type: ignore[arg-type]
    s.add_argument("--grpc-server-cert", default=None)
    s.add_argument("--grpc-server-key", default=None)
    s.add_argument("--grpc-root-cert", default=None)
    s.add_argument("--grpc-server", default=ServerOptions().grpc_server, choices=["lean", "aio"])
    s.add_argument("--allow-metrics", default=True, **b)  # type: ignore[arg-type]
    s.add_argument("--metrics-address", default="")
    s.add_argument("--metrics-port", default=8002, type=int)
    return p


def options_from_args(a: argparse.Namespace) -> ServerOptions:
    return ServerOptions(
        model_repository=[Path(p) for p in a.model_repository],
        id=a.id,
        model_control_mode=a.model_control_mode,
        strict_model_config=bool(a.strict_model_config or a.disable_auto_complete_config),
        strict_readiness=a.strict_readiness,
        exit_on_error=a.exit_on_error,
        exit_timeout_secs=a.exit_timeout_secs,
        model_load_thread_count=a.model_load_thread_count,
        model_config_name=a.model_config_name,
        log_verbose=a.log_verbose,
        allow_http=a.allow_http,
        http_address=a.http_address,
        http_port=a.http_port,
        allow_grpc=a.allow_grpc,
        grpc_address=a.grpc_address,
        grpc_port=a.grpc_port,
        reuse_grpc_port=a.reuse_grpc_port,
        grpc_header_forward_pattern=a.grpc_header_forward_pattern,
        grpc_infer_response_compression_level=a.grpc_infer_response_compression_level,
        grpc_keepalive_time=a.grpc_keepalive_time,
        grpc_keepalive_timeout=a.grpc_keepalive_timeout,
        grpc_keepalive_permit_without_calls=a.grpc_keepalive_permit_without_calls,
        grpc_http2_max_pings_without_data=a.grpc_http2_max_pings_without_data,
        grpc_http2_min_recv_ping_interval_without_data=a.grpc_http2_min_recv_ping_interval_without_data,
        grpc_http2_max_ping_strikes=a.grpc_http2_max_ping_strikes,
        grpc_max_connection_age=a.grpc_max_connection_age,
        grpc_max_connection_age_grace=a.grpc_max_connection_age_grace,
        grpc_use_ssl=a.grpc_use_ssl or a.grpc_use_ssl_mutual,
        grpc_use_ssl_mutual=a.grpc_use_ssl_mutual,
        grpc_server_cert=a.grpc_server_cert,
        grpc_server_key=a.grpc_server_key,
        grpc_root_cert=a.grpc_root_cert,
        grpc_server=a.grpc_server,
        allow_metrics=a.allow_metrics,
        metrics_address=a.metrics_address,
        metrics_port=a.metrics_port,
    )


def format_table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """An ASCII table as tritonserver prints its model table."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [sep, "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |", sep]
    for r in rows:
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |")
    lines.append(sep)
    return "\n".join(lines)


async def serve(options: ServerOptions) -> int:
    """Start, serve until SIGTERM/SIGINT, drain, stop. Returns the exit code."""
    from inferd.core.server import Server
    from inferd.frontends.http.app import HttpApp
    from inferd.frontends.http.protocol import HttpServer
    from inferd.shm.system import SharedMemoryManager

    t0 = time.monotonic()
    # handlers first: a signal that comes while models load or frontends start still drains cleanly
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = Server(options)
    for repo in options.model_repository:
        if not repo.is_dir():
            log.error("failed to stat file %s", repo)
            print(f"error: creating server: Internal - failed to stat file {repo}", file=sys.stderr)
            return 1
    await server.start()
    # What loading created lives as long as the server: keep the cyclic GC from walking it on
    # every full collection (tens of ms on the request path otherwise).
    gc.collect()
    gc.freeze()
    print(format_table(("Model", "Version", "Status"), server.model_table()), file=sys.stderr, flush=True)
    failures = server.load_failures()
    if failures and options.exit_on_error:
        for name, version, reason in failures:
            log.error("failed to load '%s'%s: %s", name, f" version {version}" if version else "", reason)
        print("error: creating server: Internal - failed to load all models", file=sys.stderr, flush=True)
        await server.stop(0)
        return 1
    # one registry of client shared-memory regions for every frontend
    shm = SharedMemoryManager()
    grpc_server: Any = None
    if options.allow_grpc:  # grpcio is imported only when gRPC is served
        from inferd.frontends.grpc.h2server import make_grpc_server

        grpc_server = make_grpc_server(server, options, shm)
        try:
            await grpc_server.start()
        except (OSError, InferdError) as e:
            print(
                f"error: failed to start GRPC service at {options.grpc_address}:{options.grpc_port}: {e}",
                file=sys.stderr,
            )
            await server.stop(0)
            return 1
        log.info("Started GRPCInferenceService at %s:%d", options.grpc_address, grpc_server.port)
    http: HttpServer | None = None
    if options.allow_http:
        http = HttpServer(HttpApp(server, shm), options.http_address, options.http_port)
        try:
            await http.start()
        except OSError as e:
            print(
                f"error: failed to start HTTP service at {options.http_address}:{options.http_port}: {e}",
                file=sys.stderr,
            )
            if grpc_server is not None:
                await grpc_server.stop(0)
            await server.stop(0)
            return 1
        log.info("Started HTTPService at %s:%d", options.http_address, http.port)
    metrics: HttpServer | None = None
    if options.allow_metrics:
        from inferd.metrics.http import metrics_server

        address = options.metrics_address or options.http_address
        metrics = metrics_server(server, address, options.metrics_port)
        try:
            await metrics.start()
        except OSError as e:
            # as the reference: a metrics port in use is an error, but serving goes on without it
            log.error("failed to start Metrics Service at %s:%d: %s", address, options.metrics_port, e)
            metrics = None
        else:
            log.info("Started Metrics Service at %s:%d", address, metrics.port)
    log.info("inferd %s ready in %.0f ms", __version__, (time.monotonic() - t0) * 1000)

    await stop.wait()
    log.info("Waiting for in-flight requests to complete.")
    if http is not None:
        http.stop_listening()
    deadline = time.monotonic() + options.exit_timeout_secs
    # gRPC refuses new RPCs from now on; running ones finish while the core drains
    grpc_stopping = None
    if grpc_server is not None:
        grpc_stopping = loop.create_task(grpc_server.stop(options.exit_timeout_secs))
    while server.inflight() and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await server.stop(max(0.0, deadline - time.monotonic()))
    if grpc_server is not None and grpc_stopping is not None:
        await grpc_server.stop(0.5)  # what is left are open streams with nothing in flight
        await grpc_stopping
    if http is not None:
        await http.stop()
    if metrics is not None:
        await metrics.stop()
    shm.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_verbose)
    options = options_from_args(args)
    # A short GIL switch interval: the event loop and instance threads hand work back and forth.
    sys.setswitchinterval(float(os.environ.get("INFERD_SWITCH_INTERVAL", "0.001")))
    try:
        import uvloop

        return uvloop.run(serve(options))
    except ImportError:
        return asyncio.run(serve(options))


if __name__ == "__main__":
    sys.exit(main())
