"""``inferd serve-ray``: deploy a model repository as a Ray Serve application, then return.

Every ``inferd serve`` flag applies to each replica (repository, control mode, backend settings);
``--http-address``/``--http-port`` and ``--grpc-port`` are Serve's proxies' (the proxies outlive
this command; ``--allow-grpc=false`` starts no gRPC proxy). The flags below size the application:
replicas autoscale between ``--min-replicas`` and ``--max-replicas`` on Serve's ongoing requests
per replica. The variables of this command's environment for stores and inferd (``AWS_*``,
``AZURE_*``, ``GOOGLE_*``, ``STORAGE_EMULATOR_HOST``, ``INFERD_*``) are handed to the replicas, so
object-store repositories load as they do for ``inferd serve``.

The command returns 0 only once every replica is running, and a replica runs only once its server
is ready (``InferdReplica.check_health``); otherwise it returns 1 with Serve's reason: a repository
that cannot be read, no model that loads, replicas the cluster cannot place within
``--deploy-timeout-s``, or proxies that already listen elsewhere (Serve keeps the ports it started
with: changed ports are refused before anything is deployed). ``--delete`` removes the application,
its statistics actor (collector.py) and, once no application is left, Serve itself (its controller
and proxies).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from inferd.options import ServerOptions
from inferd.rayserve import collector as _collector

#: Triton's service, registered with Serve's gRPC proxy as a user servicer (grpc_service.py)
SERVICER = "inferd.rayserve.grpc_service.add_GRPCInferenceServiceServicer_to_server"
#: the variables a replica needs to reach object storage as this command does
_STORE_ENV_PREFIXES = ("AWS_", "AZURE_", "GOOGLE_", "STORAGE_EMULATOR_HOST", "INFERD_")
#: the deployment's name in the application
DEPLOYMENT = "InferdReplica"
#: Serve's switch for the loop a replica runs user code on (read by its constants at import)
SEPARATE_THREAD_ENV = "RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD"
#: how often a deploy being waited for is looked at
_POLL_S = 0.5


def add_arguments(p: argparse.ArgumentParser, parse_bool: Callable[[str], bool]) -> None:
    """The Ray Serve flags of ``inferd serve-ray`` (after every ``inferd serve`` flag)."""
    g = p.add_argument_group("Ray Serve")
    g.add_argument("--address", default="auto", help="the Ray cluster to deploy to (default: %(default)s)")
    g.add_argument(
        "--name",
        default="inferd",
        help="the Serve application's name (gRPC clients need no 'application' metadata while it is the "
        "only one; default: %(default)s)",
    )
    g.add_argument("--min-replicas", type=int, default=1, help="replicas at least (default: %(default)s)")
    g.add_argument(
        "--max-replicas",
        type=int,
        default=None,
        help="replicas at most: above --min-replicas, Serve autoscales (default: --min-replicas)",
    )
    g.add_argument(
        "--target-ongoing-requests",
        type=float,
        default=4.0,
        help="the ongoing requests per replica autoscaling aims at (default: %(default)s)",
    )
    g.add_argument(
        "--max-ongoing-requests",
        type=int,
        default=64,
        help="requests a replica takes at once; more wait in the proxy. A proxy sends requests to "
        "replicas on other nodes only while those on its own node each hold this many "
        "(default: %(default)s)",
    )
    g.add_argument(
        "--upscale-delay-s",
        type=float,
        default=3.0,
        help="load held this long adds replicas (default: %(default)s)",
    )
    g.add_argument(
        "--downscale-delay-s",
        type=float,
        default=60.0,
        help="idle this long removes replicas (default: %(default)s)",
    )
    g.add_argument(
        "--replica-cpus", type=float, default=1.0, help="CPUs a replica reserves (default: %(default)s)"
    )
    g.add_argument(
        "--proxy-location",
        choices=("HeadOnly", "EveryNode"),
        default="HeadOnly",
        help="where Serve runs its proxies (EveryNode: one per node; several nodes on one machine would "
        "share the ports; default: %(default)s)",
    )
    g.add_argument(
        "--deploy-timeout-s",
        type=float,
        default=300.0,
        help="a deploy whose replicas are not all running after this long fails with Serve's reason, "
        "e.g. replicas the cluster cannot place; the application stays, waiting (default: %(default)s)",
    )
    g.add_argument(
        "--request-timeout-s",
        type=float,
        default=60.0,
        help="Serve's proxies answer a request not answered within this long (HTTP 408, gRPC "
        "DEADLINE_EXCEEDED): with Ray's object store down every request would wait for ever. "
        "0: no limit (default: %(default)s)",
    )
    g.add_argument(
        "--run-user-code-in-separate-thread",
        type=parse_bool,
        nargs="?",
        const=True,
        default=False,
        metavar="BOOL",
        help="Serve's RAY_SERVE_RUN_USER_CODE_IN_SEPARATE_THREAD for the replicas: true runs the "
        "replica's request handling on a loop of its own, false on the replica's main loop, which "
        "costs less per request (default: %(default)s)",
    )
    g.add_argument(
        "--access-log",
        type=parse_bool,
        nargs="?",
        const=True,
        default=False,
        metavar="BOOL",
        help="Serve's per-request access log, in the replicas' and (when this command starts Serve) "
        "the proxies' log files (default: %(default)s)",
    )
    g.add_argument(
        "--delete",
        action="store_true",
        help="delete the application --name, its statistics actor and, when no application is left, "
        "Serve's controller and proxies; then return",
    )


def deployment_options(args: argparse.Namespace) -> dict[str, Any]:
    """``serve.deployment``'s options for the flags: replicas, autoscaling, resources, store env,
    Serve's per-request settings."""
    env = {k: v for k, v in os.environ.items() if k.startswith(_STORE_ENV_PREFIXES)}
    # replicas report their ongoing requests this often (Serve's default, 10 s, scales slowly)
    env.setdefault("RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S", "0.5")
    env[SEPARATE_THREAD_ENV] = "1" if args.run_user_code_in_separate_thread else "0"
    actor: dict[str, Any] = {"num_cpus": args.replica_cpus, "runtime_env": {"env_vars": env}}
    out: dict[str, Any] = {
        "name": DEPLOYMENT,
        "ray_actor_options": actor,
        "max_ongoing_requests": args.max_ongoing_requests,
        "health_check_period_s": 2.0,
        "logging_config": {"enable_access_log": bool(args.access_log)},
    }
    top = args.max_replicas if args.max_replicas is not None else args.min_replicas
    if top < args.min_replicas or args.min_replicas < 1:
        raise ValueError(
            f"replicas: need 1 <= --min-replicas <= --max-replicas, got {args.min_replicas}, {top}"
        )
    if args.deploy_timeout_s <= 0:
        raise ValueError(f"--deploy-timeout-s must be above 0, got {args.deploy_timeout_s}")
    if top > args.min_replicas:
        out["autoscaling_config"] = {
            "min_replicas": args.min_replicas,
            "max_replicas": top,
            "target_ongoing_requests": args.target_ongoing_requests,
            "upscale_delay_s": args.upscale_delay_s,
            "downscale_delay_s": args.downscale_delay_s,
        }
    else:
        out["num_replicas"] = args.min_replicas
    return out


def proxy_options(args: argparse.Namespace, options: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Serve's HTTP and gRPC proxy options (gRPC: None when inferd's gRPC service is not served),
    each with ``--request-timeout-s``."""
    if args.request_timeout_s < 0:
        raise ValueError(f"--request-timeout-s must be 0 (no limit) or above, got {args.request_timeout_s}")
    timeout = args.request_timeout_s or None
    http: dict[str, Any] = {
        "host": options.http_address,
        "port": options.http_port,
        "request_timeout_s": timeout,
    }
    grpc: dict[str, Any] | None = None
    if options.allow_grpc:
        grpc = {
            "port": options.grpc_port,
            "grpc_servicer_functions": [SERVICER],
            "request_timeout_s": timeout,
        }
    return http, grpc


def proxy_mismatch(
    running: tuple[str, int, int | None, str], wanted: tuple[str, int, int | None, str]
) -> str | None:
    """Why Serve's running proxies are not the ones asked for, or None. Each side is (HTTP host,
    HTTP port, gRPC port or None when inferd's gRPC service is not served, proxy location)."""
    same = running[:2] == wanted[:2] and running[3] == wanted[3]
    if same and (wanted[2] is None or running[2] == wanted[2]):
        return None

    def where(host: str, port: int, grpc: int | None, location: str) -> str:
        served = f"gRPC at port {grpc}" if grpc is not None else "no inferd gRPC service"
        return f"HTTP at {host}:{port}, {served}, proxies {location}"

    return (
        f"Serve already runs on this cluster with {where(*running)}; asked for {where(*wanted)}. "
        "Serve keeps the proxies it started with: deploy with those settings, or delete every "
        "application (inferd serve-ray --delete --name APP; Serve stops with the last one) first"
    )


def _running_proxies(client: Any) -> tuple[str, int, int | None, str]:
    """(HTTP host, HTTP port, gRPC port if inferd's service is registered, proxy location) of the
    Serve instance ``client`` talks to (its controller's own configuration)."""
    import ray

    controller = client._controller
    http = client.http_config
    grpc = ray.get(controller.get_grpc_config.remote())
    location = ray.get(controller.get_proxy_location.remote())
    grpc_port = int(grpc.port) if SERVICER in list(grpc.grpc_servicer_functions or []) else None
    return str(http.host), int(http.port), grpc_port, str(getattr(location, "value", location))


def _reason(app: Any) -> str:
    """What Serve says of an application that is not running: its message, and each deployment's
    state and message (a replica's failure cut to its first line and its exception's: the
    traceback around it is Serve's own; ``serve status`` shows it whole)."""
    parts = [app.message.strip()] if app.message.strip() else []
    for name, dep in app.deployments.items():
        states = ", ".join(f"{n} {getattr(s, 'value', s)}" for s, n in dep.replica_states.items())
        line = f"{name}: {getattr(dep.status, 'value', dep.status)}"
        line += f" ({states} replicas)" if states else ""
        if dep.message.strip():
            line += f": {_cut(dep.message)}"
        parts.append(line)
    return "\n".join(parts) or "Serve gave no reason"


def _cut(message: str) -> str:
    """Serve's message without the traceback: its first line and the exception's."""
    from inferd.rayserve.replica import NOT_READY

    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    ours = [line[line.index(NOT_READY) :] for line in lines if NOT_READY in line]
    if ours:
        return f"{lines[0]} {ours[-1]}"
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"


def wait_running(name: str, timeout_s: float) -> str | None:
    """Wait until the application runs (None), failed, or the timeout passed (why, from Serve)."""
    from ray import serve

    deadline = time.monotonic() + timeout_s
    while True:
        app = serve.status().applications.get(name)
        if app is None:
            return "the application is gone"
        status = getattr(app.status, "value", app.status)
        if status == "RUNNING":
            return None
        if status == "DEPLOY_FAILED":
            return f"the application failed to deploy: {_reason(app)}"
        if time.monotonic() >= deadline:
            return (
                f"the application is not running after {timeout_s:g} s (--deploy-timeout-s); it stays "
                f"deployed, waiting (inferd serve-ray --delete --name {name} removes it): {_reason(app)}"
            )
        time.sleep(_POLL_S)


def delete(name: str) -> list[str]:
    """Remove the application ``name``, its statistics actor and, when no application is left,
    Serve (controller and proxies); what was removed."""
    import ray
    from ray import serve

    removed: list[str] = []
    if name in serve.status().applications:
        serve.delete(name)
        removed.append(f"Serve application '{name}'")
    try:  # after the replicas: a replica's poll would make it again (collector.py)
        actor = ray.get_actor(_collector.NAME.format(app=name), namespace=_collector.NAMESPACE)
    except ValueError:  # none: Ray's answer for a name it does not know
        actor = None
    if actor is not None:
        ray.kill(actor, no_restart=True)
        removed.append("its statistics actor")
    if serve.status().proxies and not serve.status().applications:
        shutdown: Any = serve.shutdown  # untyped in Ray
        shutdown()
        removed.append("Serve's controller and proxies (no application left)")
    return removed


def run(args: argparse.Namespace, options: ServerOptions) -> int:
    """Deploy (or ``--delete``) the application; returns the exit code."""
    try:
        import ray
        from ray import serve
    except ImportError:
        print("inferd serve-ray needs Ray Serve: pip install 'inferd[ray]'", file=sys.stderr)
        return 2
    from inferd.rayserve.replica import InferdReplica

    try:
        settings = deployment_options(args)
        proxy_options(args, options)  # a bad value stops the deploy before Ray is reached
    except ValueError as e:
        print(f"inferd serve-ray: {e}", file=sys.stderr)
        return 2
    ray.init(address=args.address, log_to_driver=False, logging_level=logging.WARNING)
    try:
        if args.delete:
            removed = delete(args.name)
            print(f"deleted {', '.join(removed)}" if removed else f"no Serve application '{args.name}'")
            return 0
        http, grpc = proxy_options(args, options)
        serve.start(  # a Serve already running keeps its own settings: checked below
            proxy_location=args.proxy_location,
            http_options=http,
            grpc_options=grpc,
            logging_config={"enable_access_log": bool(args.access_log)},
        )
        from ray.serve.context import _get_global_client

        wanted = (
            options.http_address,
            options.http_port,
            options.grpc_port if grpc else None,
            args.proxy_location,
        )
        problem = proxy_mismatch(_running_proxies(_get_global_client()), wanted)
        if problem is not None:
            print(f"inferd serve-ray: {problem}", file=sys.stderr)
            return 1
        deployment: Any = serve.deployment  # typed for its decorator form only
        app = deployment(InferdReplica, **settings).bind(options, args.name)
        try:  # not serve.run: it would wait for ever on replicas the cluster cannot place
            serve._run(app, _blocking=False, name=args.name, route_prefix="/")
        except Exception as e:  # Serve refused the application (e.g. its route prefix is taken)
            print(f"inferd serve-ray: Serve refused the application: {e}", file=sys.stderr)
            return 1
        problem = wait_running(args.name, args.deploy_timeout_s)
        if problem is not None:
            print(f"inferd serve-ray: {problem}", file=sys.stderr)
            return 1
        print(f"Serve application '{args.name}': HTTP at {options.http_address}:{options.http_port}", end="")
        print(f", gRPC at port {options.grpc_port}" if grpc else "")
        return 0
    finally:
        ray.shutdown()
