"""The composition root: the core, the shared-memory registry and the front ends, in one order.

``inferd serve`` (``cli.py``) and the in-process API (``inferd.Server``, ``api.py``) both run a
``Runtime``; nothing else builds front ends. Start: load the models, then gRPC, metrics and HTTP
(a port that cannot be bound is an error, except metrics, as in the reference; HTTP last, so that
a client that finds /v2/health/live answering finds every port open; the reference opens metrics
last). Stop: stop
accepting new connections and new sequences, drain what the open connections still bring (the
requests in flight, the live sequences' next requests) up to ``--exit-timeout-secs``, unload the
models, then close the connections, the metrics endpoint (and the GPU metrics' poll thread) and the
shared-memory mappings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
import time
from typing import TYPE_CHECKING, Any

from inferd.core.unsent import UnsentBudget, default_limit, trim_forever
from inferd.engine.server import ServerCore
from inferd.errors import InferdError, UnavailableError
from inferd.frontends.access import (
    GRPC_RESTRICTED_PREFIX,
    AccessPolicy,
    load_keys,
    parse_categories,
    parse_restrictions,
)
from inferd.frontends.forward import compile_forward_pattern
from inferd.frontends.starting import FrontendError as FrontendError  # what cli.py catches
from inferd.frontends.starting import http_limits
from inferd.frontends.tls import check_flags as check_tls_flags
from inferd.frontends.tls import server_context
from inferd.logs import LogSettings, from_options
from inferd.metrics.custom import CustomMetricRegistry
from inferd.options import ServerOptions
from inferd.scheduling.rate_limiter import from_flags as rate_limiter_from_flags
from inferd.scheduling.sequence import SequenceBatcher
from inferd.scheduling.watchdog import Watchdog
from inferd.server_config import ServerConfig
from inferd.shm.cuda import CudaSharedMemoryManager
from inferd.shm.system import SharedMemoryManager
from inferd.trace import Tracing
from inferd.trace.config import option_int
from inferd.workers.place import WorkerPlace

if TYPE_CHECKING:
    from inferd.engine.facade import Core
    from inferd.frontends.grpc.service import InferenceServicer
    from inferd.frontends.http.app import HttpApp
    from inferd.workers.peers import PeerServer

log = logging.getLogger("inferd")

#: how often the drain looks at the number of requests in flight
_DRAIN_POLL_S = 0.02
#: the end of the exit timeout kept for unloading (finalize) when requests drain until the end: the
#: drain stops this much earlier (at most a quarter of the timeout), so the process exits within it
_UNLOAD_GRACE_S = 1.0
#: while the server drains and no sequence is live: how long an idle HTTP connection stays open (a
#: request its client sent just before the signal may still be on its way)
_IDLE_GRACE_S = 0.5
#: how often the drain logs what it waits for (the reference: every second)
_REPORT_S = 1.0
#: after the unload, how long gRPC calls still open may take (within the exit timeout)
_GRPC_GRACE_S = 0.5


def unsent_limit(options: ServerOptions, place: WorkerPlace | None = None) -> int:
    """``--max-unsent-bytes``, or its default from the machine's memory; one of ``--workers``
    processes gets its share."""
    processes = max(1, options.workers) if place is not None else 1
    if options.max_unsent_bytes is None:
        return default_limit(processes=processes)
    return options.max_unsent_bytes // processes


class Runtime:
    """One server: its core and the front ends the options ask for."""

    def __init__(
        self, options: ServerOptions, logs: LogSettings | None = None, place: WorkerPlace | None = None
    ) -> None:
        if place is not None:  # one of --workers processes: the ports are shared
            options = dataclasses.replace(options, reuse_grpc_port=True)
        self.options = options
        #: the options parsed once, in typed parts: each component gets its own (server_config.py); a
        #: malformed flag value stops the start here, with its text
        self.config = ServerConfig.from_options(options)
        #: this process's place among the ``--workers`` processes (None: it is the whole server)
        self.place = place
        #: the log switches (the logging extension changes them); an embedding program keeps its
        #: own handlers unless it hands one over
        # an embedded server logs through its program's own handlers, unless the options name a file
        self.logs = logs if logs is not None else from_options(self.config.logs, attach=False)
        self._own_logs = logs is None  # closed at ``stop`` (its file; its verbosity no longer counts)
        for warning in check_tls_flags(options):  # a TLS combination that would protect less: refused
            log.warning("%s", warning)
        #: the trace extension (settings, sampling, trace files or OpenTelemetry spans)
        self.tracing = Tracing.from_flags(options.trace_config, "" if place is None else f".{place.index}")
        #: the custom metrics of the models (``pb_utils.MetricFamily``), rendered on /metrics
        self.custom_metrics = CustomMetricRegistry()
        #: ``--rate-limit execution_count``: which instance of every model executes next (None: off)
        rate_limiter = rate_limiter_from_flags(options.rate_limit, options.rate_limit_resource, option_int)
        #: the bytes of answers held for clients that have not read them, in this process: one budget
        #: for both front ends and the decoupled streams (core/unsent.py, frontends/flow.py)
        self.unsent = UnsentBudget(unsent_limit(options, place))
        #: the execute watchdog of this server's models: its own thread, ended at ``stop``
        self.watchdog = Watchdog()
        self.core = ServerCore(
            self.config.core, self.custom_metrics, rate_limiter, self.unsent, self.watchdog, self.logs
        )
        #: client shared-memory regions: one registry (of each kind) for every front end
        self.shm = SharedMemoryManager(options.allow_client_shm)
        self.cuda_shm = CudaSharedMemoryManager(options.allow_client_shm, self.shm)  # one namespace
        #: the core the front ends serve: the whole server's view when this is one of several processes
        self.front_core: Core = self.core
        self.peer_server: PeerServer | None = None
        if place is not None:
            from inferd.metrics.collector import render
            from inferd.workers.peers import Peers, PeerServer, WorkersCore

            core, peers = self.core, Peers(place)
            self.front_core = WorkersCore(core, peers, lambda: render(core))
            self.peer_server = PeerServer(
                place, core, lambda: render(core), self.shm, self.logs, self.tracing
            )
            self.shm.propagate = self.cuda_shm.propagate = peers.everywhere
            self.logs.propagate = self.tracing.propagate = peers.soon
        keys = load_keys(options.api_keys_file)
        exempt = parse_categories(options.api_keys_exempt) if keys else frozenset()
        #: who may use which API, per front end (restrictions differ; the keys are the same)
        self.http_access = AccessPolicy(
            parse_restrictions(options.http_restricted_api, "http-restricted-api"), keys, exempt
        )
        self.grpc_access = AccessPolicy(
            parse_restrictions(
                options.grpc_restricted_protocol,
                "grpc-restricted-protocol",
                GRPC_RESTRICTED_PREFIX,
                "protocol",
            ),
            keys,
            exempt,
        )
        self.http: Any = None
        #: the SageMaker and Vertex AI ports (frontends/cloud.py), when asked for
        self.clouds: Any = None
        self.grpc: Any = None
        self.metrics: Any = None
        self._trimming: asyncio.Task[None] | None = None  # memory held for clients, given back
        self._stopped = False

    async def load(self) -> None:
        """Load the model repositories (control mode none: every model, now); a ``--workers``
        process started again in explicit mode also loads what the others serve."""
        await self.core.start()
        catch_up = getattr(self.front_core, "catch_up", None)
        if catch_up is not None:
            await catch_up(self.shm, self.options.model_control_mode == "explicit")

    async def start_frontends(self) -> None:
        """gRPC, HTTP and metrics, as the options ask; FrontendError when gRPC or HTTP cannot bind
        (what started is stopped again)."""
        options = self.options
        self._trimming = asyncio.get_running_loop().create_task(trim_forever(self.unsent))
        try:
            if self.peer_server is not None:  # before the ports: a peer may ask as soon as clients do
                await self.peer_server.start()
            if options.allow_grpc:  # grpcio is imported only when gRPC is served
                from inferd.frontends.grpc.h2server import make_grpc_server

                grpc_server = make_grpc_server(self.grpc_servicer(), self.unsent)
                try:
                    await grpc_server.start()
                except (OSError, InferdError) as e:
                    raise FrontendError(
                        f"failed to start GRPC service at {options.grpc_address}:{options.grpc_port}: {e}"
                    ) from e
                self.grpc = grpc_server
                log.info("Started GRPCInferenceService at %s:%d", options.grpc_address, grpc_server.port)
            await self._start_gpu_metrics()
            if options.allow_metrics:  # before HTTP: a client that finds HTTP live finds metrics too
                await self._start_metrics()
            if options.allow_sagemaker or options.allow_vertex_ai:
                from inferd.frontends.cloud import start_cloud_frontends

                self.clouds = await start_cloud_frontends(self)
            if options.allow_http:
                from inferd.frontends.http.server import HttpServer

                app = self.http_app()
                http = HttpServer(
                    app,
                    options.http_address,
                    options.http_port,
                    http_limits(options),
                    self._http_tls(),
                    reuse_port=self.place is not None or options.reuse_http_port,
                    budget=self.unsent,
                )
                try:
                    await http.start()
                except OSError as e:
                    raise FrontendError(
                        f"failed to start HTTP service at {options.http_address}:{options.http_port}: {e}"
                    ) from e
                self.http = http
                log.info("Started HTTPService at %s:%d", options.http_address, http.port)
        except FrontendError:
            await self.stop()  # nothing is in flight: the models unload (finalize) within the exit timeout
            raise

    def grpc_servicer(self, core: Core | None = None) -> InferenceServicer:
        """GRPCInferenceService over this server's core (or ``core``, a view of it), transport-free:
        the gRPC front end mounts it, and so does a Ray Serve replica (``inferd.rayserve``)."""
        from inferd.frontends.grpc.service import InferenceServicer

        return InferenceServicer(
            core or self.front_core,
            self.config.grpc,
            self.shm,
            self.cuda_shm,
            self.grpc_access,
            self.logs,
            self.tracing,
            self.unsent,
        )

    def http_app(self, core: Core | None = None, access: AccessPolicy | None = None) -> HttpApp:
        """The HTTP routes over this server's core (or ``core``, a view of it), transport-free: the
        HTTP front end serves it, and so does a Ray Serve replica (``inferd.rayserve``); ``access``
        instead of the HTTP port's rules (the SageMaker and Vertex AI ports')."""
        from inferd.frontends.http.app import HttpApp
        from inferd.frontends.http.openai_schema import OpenAILimits

        options = self.options
        return HttpApp(
            core or self.front_core,
            self.shm,
            self.cuda_shm,
            max_input_size=options.http_max_input_size,
            access=self.http_access if access is None else access,
            logs=self.logs,
            tracing=self.tracing,
            header_forward=compile_forward_pattern(
                options.http_header_forward_pattern, "--http-header-forward-pattern"
            ),
            openai_limits=OpenAILimits(
                prompts=options.openai_max_prompts,
                messages=options.openai_max_messages,
                embedding_inputs=options.openai_max_embedding_inputs,
                stop_sequences=options.openai_max_stop_sequences,
            ),
        )

    def _http_tls(self) -> ssl.SSLContext | None:
        options = self.options
        if not (options.http_ssl_cert or options.http_ssl_key):
            return None
        try:
            return server_context(options.http_ssl_cert, options.http_ssl_key, options.http_ssl_root_cert)
        except InferdError as e:
            raise FrontendError(f"failed to start HTTP service: {e}") from e

    async def _start_gpu_metrics(self) -> None:
        """The GPUs' families (metrics/gpu.py) where GPUs are found: polled through NVML on a thread
        of their own with ``--allow-metrics`` and ``--allow-gpu-metrics``; the status page lists the
        GPUs either way. NVML is asked off the loop."""
        from inferd.gpu.devices import machine_gpus
        from inferd.metrics.gpu import for_server

        options = self.options
        poll = options.allow_metrics and options.allow_gpu_metrics
        self.core.gpu_metrics = await asyncio.to_thread(
            lambda: for_server(machine_gpus(), options.metrics_interval_ms, poll)
        )

    async def _start_metrics(self) -> None:
        from inferd.metrics.http import metrics_server

        options = self.options
        address = options.metrics_address or options.http_address
        gather = getattr(self.front_core, "gather_metrics", None)  # the whole server's, with --workers
        metrics = metrics_server(
            self.core,
            address,
            options.metrics_port,
            self._http_tls(),
            gather,
            reuse_port=self.place is not None,
            access=self.http_access,
        )
        try:
            await metrics.start()
        except OSError as e:
            # as the reference: a metrics port in use is an error, but serving goes on without it
            log.error("failed to start Metrics Service at %s:%d: %s", address, options.metrics_port, e)
            return
        self.metrics = metrics
        log.info("Started Metrics Service at %s:%d", address, metrics.port)

    async def stop(self, timeout_s: float | None = None, since: float | None = None) -> bool:
        """Stop accepting, drain (up to ``timeout_s``, default ``--exit-timeout-secs``, counted from
        ``since``, a ``time.monotonic()`` such as the signal's, default now), unload, close.

        The drain, as the reference's: new connections are refused and the open ones served on; a
        new sequence is refused (its text) and the live ones go on, their next requests coming on
        their clients' connections. Once no sequence is live, every HTTP answer says ``Connection:
        close`` and an idle connection closes after ``_IDLE_GRACE_S``; gRPC clients get GOAWAY
        (their running calls finish). The drain ends when nothing is in flight, no sequence is live
        and no HTTP connection is open, or at its deadline.

        A hard bound: requests still open near the deadline (a quarter of the timeout, at most a
        second, is kept for unloading) are answered UNAVAILABLE (clients get an error, not an empty
        reply), later requests on a connection still open get UNAVAILABLE too, and models that do
        not unload by the deadline are left behind. False when that happened (the process should
        then exit without waiting for their threads).
        """
        if self._stopped:
            return True
        self._stopped = True
        timeout = self.options.exit_timeout_secs if timeout_s is None else timeout_s
        loop = asyncio.get_running_loop()
        if self.peer_server is not None:  # the other processes stop counting this one
            await self.peer_server.stop()
        begun = time.monotonic()
        deadline = (begun if since is None else min(since, begun)) + timeout
        drain_deadline = deadline - min(_UNLOAD_GRACE_S, timeout / 4)
        core = self.core
        batchers = sequence_batchers(core)
        for b in batchers:
            b.drain()
        if self.http is not None:
            self.http.stop_listening()
        if self.clouds is not None:
            self.clouds.stop_listening()
        grpc_stopping: asyncio.Task[None] | None = None
        if self.grpc is not None:
            if hasattr(self.grpc, "stop_listening"):
                self.grpc.stop_listening()
            else:  # grpc.aio refuses new calls at once; running ones finish while the core drains
                grpc_stopping = loop.create_task(self.grpc.stop(timeout))
        report = begun + _REPORT_S
        while True:
            now = time.monotonic()
            live = sum(b.live_sequences() for b in batchers)
            connections = 0
            if not live:  # nothing the server serves needs the open connections any more
                if self.http is not None:
                    connections = self.http.wind_down(_IDLE_GRACE_S)
                if self.clouds is not None:
                    connections += self.clouds.wind_down(_IDLE_GRACE_S)
                if self.grpc is not None and grpc_stopping is None:
                    grpc_stopping = loop.create_task(self.grpc.stop(max(0.0, drain_deadline - now)))
            inflight = core.inflight()
            if not (inflight or live or connections) or now >= drain_deadline:
                break
            if now >= report:
                report += _REPORT_S
                found = [f"{inflight} in-flight request(s)", f"{live} live sequence(s)"]
                if connections:
                    found.append(f"{connections} open HTTP connection(s)")
                log.info("Timeout %d: Found %s", max(0, round(deadline - now)), ", ".join(found))
            await asyncio.sleep(_DRAIN_POLL_S)
        core.refuse_requests()  # the drain is over: what comes now, on an open connection, is refused
        clean = True
        error = UnavailableError(
            f"the server is shutting down: the request did not finish within {timeout:g} s"
        )
        if live:
            log.warning(
                "%d sequence(s) did not end within %g s: their next requests are answered UNAVAILABLE",
                live,
                timeout,
            )
        if core.inflight():  # the deadline passed with executes still running: their clients get an error
            clean = False
            log.warning(
                "%d request(s) still in flight after %g s: answered UNAVAILABLE", core.inflight(), timeout
            )
            core.fail_open_requests(error)
            await asyncio.sleep(0)  # their answers are written before the connections close
        if self.http is not None:  # what comes on a connection still open is answered and closes it
            self.http.wind_down(_IDLE_GRACE_S)
        if self.clouds is not None:
            self.clouds.wind_down(_IDLE_GRACE_S)
        if self.grpc is not None and grpc_stopping is None:
            grpc_stopping = loop.create_task(self.grpc.stop(0.0))
        unloading = loop.create_task(core.stop(max(0.0, deadline - time.monotonic())))
        done, _ = await asyncio.wait({unloading}, timeout=max(0.0, deadline - time.monotonic()))
        if not done:
            clean = False
            log.warning("models did not unload within the exit timeout; leaving them behind")
        if core.fail_open_requests(error):  # what unloading did not end (a hung finalize)
            await asyncio.sleep(0)
        if self.grpc is not None and grpc_stopping is not None:
            # what is left: streams with nothing in flight, or whose request is still arriving (it gets
            # an answer, UNAVAILABLE, if it comes within the grace)
            await self.grpc.stop(max(0.0, min(_GRPC_GRACE_S, deadline - time.monotonic())))
            await asyncio.wait({grpc_stopping}, timeout=max(0.0, min(1.0, deadline - time.monotonic())))
        if self.http is not None:
            await self.http.stop()
        if self._trimming is not None:
            self._trimming.cancel()
        if self.clouds is not None:
            await self.clouds.stop()
        if self.metrics is not None:
            await self.metrics.stop()
        if self.core.gpu_metrics is not None:
            await asyncio.to_thread(self.core.gpu_metrics.stop)
        self.watchdog.close()
        if self._own_logs:
            self.logs.close()
        self.shm.close()
        self.cuda_shm.close()
        self.tracing.close()  # what the settings still hold goes to the trace files
        return clean


def sequence_batchers(core: ServerCore) -> list[SequenceBatcher]:
    """The sequence batchers of the models loaded now (the drain waits for their live sequences)."""
    return [
        m.scheduler
        for versions in core.registry.models.values()
        for m in versions.values()
        if isinstance(m.scheduler, SequenceBatcher)
    ]
