"""``inferd serve-ray``: deploy a model repository as a Ray Serve application, then return.

Every ``inferd serve`` flag applies to each replica (repository, control mode, backend settings);
``--http-address``/``--http-port`` and ``--grpc-port`` are Serve's proxies' (the proxies outlive
this command; ``--allow-grpc=false`` starts no gRPC proxy). The flags below size the application:
replicas autoscale between ``--min-replicas`` and ``--max-replicas`` on Serve's ongoing requests
per replica. The variables of this command's environment for stores and inferd (``AWS_*``, ``AZURE_*``, ``INFERD_*``) are handed
to the replicas, so ``s3://`` and ``as://`` repositories load as they do for ``inferd serve``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from typing import Any

from inferd.options import ServerOptions

#: Triton's service, registered with Serve's gRPC proxy as a user servicer (grpc_service.py)
SERVICER = "inferd.rayserve.grpc_service.add_GRPCInferenceServiceServicer_to_server"
#: the variables a replica needs to reach object storage as this command does
_STORE_ENV_PREFIXES = ("AWS_", "AZURE_", "INFERD_")


def add_arguments(p: argparse.ArgumentParser) -> None:
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
        help="requests a replica takes at once; more wait in the proxy (default: %(default)s)",
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
    g.add_argument("--delete", action="store_true", help="delete the application --name and return")


def deployment_options(args: argparse.Namespace) -> dict[str, Any]:
    """``serve.deployment``'s options for the flags: replicas, autoscaling, resources, store env."""
    env = {k: v for k, v in os.environ.items() if k.startswith(_STORE_ENV_PREFIXES)}
    # replicas report their ongoing requests this often (Serve's default, 10 s, scales slowly)
    env.setdefault("RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S", "0.5")
    actor: dict[str, Any] = {"num_cpus": args.replica_cpus, "runtime_env": {"env_vars": env}}
    out: dict[str, Any] = {
        "name": "InferdReplica",
        "ray_actor_options": actor,
        "max_ongoing_requests": args.max_ongoing_requests,
        "health_check_period_s": 2.0,
    }
    top = args.max_replicas if args.max_replicas is not None else args.min_replicas
    if top < args.min_replicas or args.min_replicas < 1:
        raise ValueError(
            f"replicas: need 1 <= --min-replicas <= --max-replicas, got {args.min_replicas}, {top}"
        )
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
    except ValueError as e:
        print(f"inferd serve-ray: {e}", file=sys.stderr)
        return 2
    ray.init(address=args.address, log_to_driver=False, logging_level=logging.WARNING)
    try:
        if args.delete:
            serve.delete(args.name)
            print(f"deleted Serve application '{args.name}'")
            return 0
        grpc: dict[str, Any] | None = None
        if options.allow_grpc:
            grpc = {"port": options.grpc_port, "grpc_servicer_functions": [SERVICER]}
        serve.start(
            proxy_location=args.proxy_location,
            http_options={"host": options.http_address, "port": options.http_port},
            grpc_options=grpc,
        )
        deployment: Any = serve.deployment  # typed for its decorator form only
        app = deployment(InferdReplica, **settings).bind(options, args.name)
        try:
            serve.run(app, name=args.name, route_prefix="/", blocking=False)
        except RuntimeError as e:
            print(f"inferd serve-ray: the application did not start: {e}", file=sys.stderr)
            return 1
        print(f"Serve application '{args.name}': HTTP at {options.http_address}:{options.http_port}", end="")
        print(f", gRPC at port {options.grpc_port}" if grpc else "")
        return 0
    finally:
        ray.shutdown()
