"""``inferd serve``: tritonserver's flags -> ServerOptions; runs the server and its frontends."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import logging
import os
import sys
import time
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from inferd import __version__, compat_flags, hotpath
from inferd.backends.python.fork_signals import default_signals_in_forks
from inferd.errors import InferdError
from inferd.frontends.forward import compile_forward_pattern
from inferd.logs import LogSettings, TritonFormatter, from_options
from inferd.options import FLAG_GROUPS, ServerOptions
from inferd.repository.remote import parse_store_url
from inferd.server_config import LogConfig
from inferd.stop_signals import StopSignals
from inferd.workers.place import WorkerPlace, die_with_supervisor

__all__ = [
    "TritonFormatter",
    "build_parser",
    "format_table",
    "main",
    "options_from_args",
    "serve",
    "tritonserver",
]

log = logging.getLogger("inferd")


def _bool(text: str) -> bool:
    v = text.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean value '{text}' (use true/false/1/0)")


def _shown_default(f: dataclasses.Field[Any]) -> str:
    """A field's default as ``--help`` shows it: true/false, 600 (not 600.0), "not set" for None, "" and []
    (``metadata["default_text"]`` where words say it better)."""
    if "default_text" in f.metadata:
        return str(f.metadata["default_text"])
    value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    if value is None or value == "" or value == []:
        return "not set"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return format(value, "g")
    return str(value)


def _add_option(group: argparse._ActionsContainer, f: dataclasses.Field[Any], hint: Any) -> None:
    """The flag of one ServerOptions field: its type from the annotation, help and default from the field.
    Its help ends with what --help says of every flag: repeatable or not, and the default (or required)."""
    meta = f.metadata
    flags = meta.get("flags") or ("--" + f.name.replace("_", "-"),)
    kwargs: dict[str, Any] = {"dest": f.name}
    notes = []
    if f.default is not dataclasses.MISSING:
        kwargs["default"] = f.default
    if "choices" in meta:
        kwargs["choices"] = meta["choices"]
    if meta.get("any_case"):
        kwargs["type"] = str.lower
    base = [t for t in typing.get_args(hint) if t is not type(None)] or [hint]
    kind = base[0] if len(base) == 1 else hint
    if typing.get_origin(hint) is list:  # repeatable flags
        item = typing.get_args(hint)[0]
        required = bool(meta.get("required"))
        kwargs.update(action="append", default=[], required=required, type=item)
        kwargs["metavar"] = "PATH" if item is Path else "SETTING"
        notes.append("required; repeatable" if required else "repeatable")
    elif kind is bool:
        kwargs.update(type=_bool, nargs="?", const=True, metavar="BOOL")
    elif kind is int:
        kwargs.update(type=int, metavar="N")
    elif kind is float:
        kwargs.update(type=float, metavar="SECONDS")
    elif kind is Path:
        kwargs.update(type=Path, metavar="PATH")
    elif "choices" not in meta:
        kwargs["metavar"] = "TEXT"
    if "metavar" in meta:
        kwargs["metavar"] = meta["metavar"]
    if not meta.get("required"):
        notes.append(f"default: {_shown_default(f)}")
    kwargs["help"] = f"{meta['help']} ({'; '.join(notes)})".replace("%", "%%")
    group.add_argument(*flags, **kwargs)


def _add_server_options(parser: argparse.ArgumentParser) -> None:
    """Every ServerOptions flag, under its topic (options.FLAG_GROUPS), then tritonserver's flags
    without a field (compat_flags)."""
    hints = typing.get_type_hints(ServerOptions)
    fields = {f.name: f for f in dataclasses.fields(ServerOptions) if f.metadata.get("cli", True)}
    for title, description, names in FLAG_GROUPS:
        group = parser.add_argument_group(title, description)
        for name in names:
            _add_option(group, fields.pop(name), hints[name])
    if fields:  # a field FLAG_GROUPS does not list yet (tests/unit/test_cli.py names it)
        other = parser.add_argument_group("other")
        for name, f in fields.items():
            _add_option(other, f, hints[name])
    compat_flags.add_arguments(parser, _bool)


#: the usage line of serve and serve-ray (argparse's own lists every flag: 80 lines)
_USAGE = "%(prog)s --model-repository PATH [--model-repository PATH ...] [FLAG ...]"


def build_parser() -> argparse.ArgumentParser:
    """``inferd serve`` takes one flag per ServerOptions field (tritonserver's names)."""
    p = argparse.ArgumentParser(prog="inferd", description="A Triton-compatible inference server.")
    p.add_argument("--version", action="version", version=f"inferd {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser(
        "serve",
        aliases=["tritonserver"],  # an image whose ENTRYPOINT is inferd runs Triton's `tritonserver ...` args
        help="serve model repositories (tritonserver's flags)",
        description="Serve Triton model repositories over HTTP/REST and gRPC (KServe v2, Triton's extensions). "
        "A boolean flag alone means true; --flag=false turns it off.",
        usage=_USAGE,
    )
    _add_server_options(s)
    _cloud_defaults(s, os.environ)
    r = sub.add_parser(
        "serve-ray",
        help="deploy model repositories as a Ray Serve application (inferd[ray])",
        description="Deploy Triton model repositories to a Ray cluster as a Serve application: each replica "
        "runs inferd's core; Triton's HTTP and gRPC APIs go through Serve's proxies. Every 'serve' flag "
        "applies to the replicas; --http-address, --http-port and --grpc-port are the proxies'.",
        usage=_USAGE,
    )
    _add_server_options(r)
    from inferd.rayserve.deploy import add_arguments as add_ray_arguments

    add_ray_arguments(r, _bool)
    c = sub.add_parser(
        "check",
        help="check model repositories offline: every problem as file:line:column",
        description="Check every model of the repositories as the server would load it, without loading "
        "any: print each problem as file:line:column: severity: message; exit 1 if one is an error.",
    )
    from inferd.check import add_arguments

    add_arguments(c)
    return p


def _cloud_defaults(parser: argparse.ArgumentParser, environ: typing.Mapping[str, str]) -> None:
    """What Vertex AI's environment changes, as tritonserver reads it (frontends/cloud.py):
    AIP_MODE=PREDICTION's defaults, AIP_HTTP_PORT, and AIP_STORAGE_URI as the repository when no
    --model-repository is given (``main`` adds it)."""
    from inferd.frontends.cloud import env_defaults

    try:
        parser.set_defaults(**env_defaults(environ))
    except ValueError as e:
        parser.set_defaults(cloud_env_error=f"AIP_HTTP_PORT: {e}")
    if environ.get("AIP_STORAGE_URI"):
        for action in parser._actions:
            if action.dest == "model_repository":
                action.required = False


def _cloud_checks(parser: argparse.ArgumentParser, args: argparse.Namespace, options: ServerOptions) -> None:
    """The environment's and the ports' refusals, with the reference's texts (frontends/cloud.py)."""
    from inferd.frontends.cloud import port_conflict

    if getattr(args, "cloud_env_error", None):
        parser.error(args.cloud_env_error)
    try:
        conflict = port_conflict(options)
    except ValueError as e:
        parser.error(f'Bad option: "--sagemaker-safe-port-range". {e}')
    if conflict is not None:
        parser.error(conflict)


def options_from_args(a: argparse.Namespace) -> ServerOptions:
    """The ServerOptions of parsed ``serve`` arguments (every flag is a field of the same name)."""
    names = [f.name for f in dataclasses.fields(ServerOptions) if f.metadata.get("cli", True)]
    return ServerOptions(**{name: getattr(a, name) for name in names})


def format_table(headers: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    """An ASCII table as tritonserver prints its model table; a cell of several lines (a failure's
    reason with a traceback) takes as many lines of the table, the other cells blank below theirs."""
    split = [[c.splitlines() or [""] for c in r] for r in rows]
    widths = [
        max(len(h), *(len(line) for cells in split for line in cells[i])) if rows else len(h)
        for i, h in enumerate(headers)
    ]
    sep = "+" + "+".join("-" * (w + 2) for w in widths) + "+"
    lines = [sep, "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |", sep]
    for cells in split:
        for k in range(max(len(c) for c in cells)):
            parts = (c[k] if k < len(c) else "" for c in cells)
            lines.append("| " + " | ".join(t.ljust(w) for t, w in zip(parts, widths, strict=True)) + " |")
    lines.append(sep)
    return "\n".join(lines)


def print_model_table(rows: Sequence[tuple[str, ...]], as_json: bool) -> None:
    """The model table at start: as tritonserver prints it, or with ``--log-format json`` one log
    line a model version (``model``, ``version``, ``status`` keys), so that every line is JSON."""
    if not as_json:
        print(format_table(("Model", "Version", "Status"), rows), file=sys.stderr, flush=True)
        return
    for name, version, status in rows:
        fields = {"model": name, "version": version, "status": status}
        log.info("model '%s' version %s: %s", name, version, status, extra={"fields": fields})


_CONTROL_MODES = {"none": "MODE_NONE", "poll": "MODE_POLL", "explicit": "MODE_EXPLICIT"}


def option_rows(options: ServerOptions, cache_enabled: bool) -> list[tuple[str, str]]:
    """The reference's start-up options table, row for row, from inferd's options (the pinned
    memory pool: 0, inferd keeps none); ``cache_enabled``: the server has a response cache (its
    parsed ``--cache-config``)."""
    from inferd.engine.server import EXTENSIONS, PROTOCOL_VERSION

    rows = [
        ("server_id", options.id),
        ("server_version", PROTOCOL_VERSION),
        ("server_extensions", " ".join(EXTENSIONS)),
    ]
    rows += [(f"model_repository_path[{i}]", str(path)) for i, path in enumerate(options.model_repository)]
    rows += [
        ("model_control_mode", _CONTROL_MODES.get(options.model_control_mode, options.model_control_mode)),
        ("strict_model_config", str(int(options.strict_model_config))),
        ("model_config_name", options.model_config_name or ""),
        ("rate_limit", "EXEC_COUNT" if options.rate_limit.lower() == "execution_count" else "OFF"),
        ("pinned_memory_pool_byte_size", "0"),
        ("min_supported_compute_capability", f"{options.min_supported_compute_capability:.1f}"),
        ("strict_readiness", str(int(options.strict_readiness))),
        ("exit_timeout", str(options.exit_timeout_secs)),
        ("cache_enabled", str(int(cache_enabled))),
    ]
    return rows


def print_options(options: ServerOptions, as_json: bool, cache_enabled: bool = False) -> None:
    """The options table the reference prints at start; at ``--log-verbose 1`` every inferd option
    in effect too (the flag's name, its value). JSON lines with ``--log-format json``."""
    tables = [(("Option", "Value"), option_rows(options, cache_enabled))]
    if options.log_verbose >= 1:
        every = [
            (f"--{f.name.replace('_', '-')}", _shown(getattr(options, f.name), f.name in _SECRET_VALUES))
            for f in dataclasses.fields(ServerOptions)
            if f.metadata.get("cli", True)
        ]
        tables.append((("inferd option", "Value"), every))
    for headers, rows in tables:
        if not as_json:
            print(format_table(headers, rows), file=sys.stderr, flush=True)
            continue
        for name, value in rows:
            log.info(
                "%s %s: %s",
                headers[0].lower(),
                name,
                value,
                extra={"fields": {"option": name, "value": value}},
            )


#: options whose values hold a secret after '=' (a restricted API's header value): shown without it
_SECRET_VALUES = frozenset({"http_restricted_api", "grpc_restricted_protocol"})


def _shown(value: object, secret: bool = False) -> str:
    if isinstance(value, list | tuple):
        return " ".join(_shown(v, secret) for v in value)
    if secret and isinstance(value, str) and "=" in value:
        return value.partition("=")[0] + "=***"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


async def serve(options: ServerOptions, logs: LogSettings | None = None) -> int:
    """Start, serve until SIGTERM/SIGINT, drain, stop. Returns the exit code (``main`` exits with
    it at once: the loop's shutdown would wait for every thread, a model's hung one too)."""
    t0 = time.monotonic()
    # handlers first: a signal that comes while models load or frontends start still drains cleanly;
    # seen by a thread, so that a model holding the loop cannot keep the server from exiting in time
    stop = asyncio.Event()
    signals = StopSignals(asyncio.get_running_loop(), stop, options.exit_timeout_secs)
    default_signals_in_forks()  # the processes a model forks do not stop the server
    try:
        return await _serve(options, logs, stop, signals, t0)
    finally:
        signals.restore()


async def _serve(
    options: ServerOptions, logs: LogSettings | None, stop: asyncio.Event, signals: StopSignals, t0: float
) -> int:
    from inferd.frontends.access import AccessConfigError
    from inferd.runtime import FrontendError, Runtime

    loop = asyncio.get_running_loop()
    for repo in options.model_repository:
        try:
            remote = parse_store_url(repo) is not None  # a store is read when the models load
        except InferdError as e:
            print(f"error: creating server: {e}", file=sys.stderr)
            return 1
        if not remote and not repo.is_dir():
            log.error("failed to stat file %s", repo)
            print(f"error: creating server: Internal - failed to stat file {repo}", file=sys.stderr)
            return 1
    place = WorkerPlace.from_env()  # one of --workers processes, or None
    try:
        runtime = Runtime(options, logs, place)
    except (AccessConfigError, InferdError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    loading = loop.create_task(runtime.load())
    stopped = loop.create_task(stop.wait())
    await asyncio.wait({loading, stopped}, return_when=asyncio.FIRST_COMPLETED)
    if not loading.done():  # SIGTERM while a model loads (perhaps forever): honoured now
        log.warning("Stopped while loading models; exiting without waiting for them.")
        await runtime.stop(0)
        hard_exit(0)
    stopped.cancel()
    loading.result()
    # What loading created lives as long as the server: keep the cyclic GC from walking it on
    # every full collection (tens of ms on the request path otherwise).
    gc.collect()
    gc.freeze()
    core = runtime.core
    if place is None or place.index == 0:  # the tables once, not once per --workers process
        print_model_table(core.model_table(), runtime.logs.format == "json")
        cache_enabled = runtime.config.core.cache_bytes is not None  # parsed once, by the Runtime
        print_options(options, runtime.logs.format == "json", cache_enabled)
    failures = core.load_failures()
    if failures and options.exit_on_error:
        for name, version, reason in failures:
            if not version:  # a version's failure was logged when it failed (engine/repository_manager.py)
                log.error("failed to load '%s': %s", name, reason)
        print("error: creating server: Internal - failed to load all models", file=sys.stderr, flush=True)
        await runtime.stop()  # the loaded models unload (finalize), as the reference's do
        return 1
    try:
        await runtime.start_frontends()
    except FrontendError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    log.info("inferd %s ready in %.0f ms", __version__, (time.monotonic() - t0) * 1000)
    if place is None or place.index == 0:
        log.info("hot path: %s", hotpath.describe())
    if place is not None:
        place.announce_ready()
    await stop.wait()
    log.info("Waiting for in-flight requests to complete.")
    await runtime.stop(since=signals.received_at)  # the exit timeout counts from the signal
    return 0


def hard_exit(code: int) -> NoReturn:
    """Leave the process now: the event loop's shutdown would wait for every worker thread, and a
    model's thread that never returns (a hung execute, initialize or finalize) would hold it forever."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


_STRICT_DEPRECATED = (
    "'--strict-model-config' has been deprecated! Please use '--disable-auto-complete-config' instead."
)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    command_line = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    deprecated = any(a.split("=", 1)[0] == "--strict-model-config" for a in command_line)
    if deprecated and getattr(args, "log_format", "default") != "json":  # the reference's words, at once
        print(f"Warning: {_STRICT_DEPRECATED}", file=sys.stderr)
    if args.command == "check":
        from inferd.check import run

        return run(args)
    try:  # tritonserver's flags without a field: logged below
        compat_notes = compat_flags.apply(args)
    except ValueError as e:
        parser.error(str(e))
    if args.command != "check" and not args.model_repository and os.environ.get("AIP_STORAGE_URI"):
        args.model_repository = [Path(os.environ["AIP_STORAGE_URI"])]  # as tritonserver reads it
    if args.load_model and args.model_control_mode != "explicit":  # as tritonserver refuses it
        parser.error("Use of '--load-model' requires setting '--model-control-mode=explicit' as well.")
    from inferd.engine.on_demand import budget_from_options

    try:
        budget_from_options(args.model_memory_budget, args.model_control_mode)
    except InferdError as e:
        parser.error(e.message)
    for flag, pattern in (
        ("--http-header-forward-pattern", args.http_header_forward_pattern),
        ("--grpc-header-forward-pattern", args.grpc_header_forward_pattern),
    ):
        try:
            compile_forward_pattern(pattern, flag)
        except InferdError as e:
            parser.error(e.message)
    if args.command == "serve-ray":
        from inferd.rayserve.deploy import run as deploy

        return deploy(args, options_from_args(args))
    if argv is None:
        # models see the command line Triton's Python stub gives them ([""]), not the server's: a
        # model that parses arguments (or calls unittest.main()) would read inferd's flags and exit
        sys.argv[:] = [""]
    options = options_from_args(args)
    _cloud_checks(parser, args, options)
    place = WorkerPlace.from_env()
    if place is None and options.workers != 1:
        from inferd.workers.supervisor import supervise

        return supervise(options, command_line)
    if place is not None:
        die_with_supervisor()
    logs = from_options(LogConfig.from_options(options))
    if deprecated and options.log_format == "json":  # every line JSON: through the log
        log.warning("%s", _STRICT_DEPRECATED)
    for note in compat_notes:
        log.warning("%s", note)
    # A short GIL switch interval: the event loop and instance threads hand work back and forth.
    sys.setswitchinterval(float(os.environ.get("INFERD_SWITCH_INTERVAL", "0.001")))
    loop: asyncio.AbstractEventLoop
    try:
        import uvloop

        loop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        code = loop.run_until_complete(serve(options, logs))
    except Exception:
        log.exception("inferd stopped on an unexpected error")
        code = 1
    # not the loop's shutdown, which waits for every thread: a model's thread that never returns (a
    # hung initialize, execute or finalize) would hold the exit forever
    hard_exit(code)


def _number(arg: str) -> bool:
    try:
        float(arg)
    except ValueError:
        return False
    return True


def unknown_option(argv: list[str]) -> str | None:
    """The first option of ``argv`` (``serve``'s arguments) that is no flag of ``serve``, or None."""
    serve = next(
        action.choices["serve"]
        for action in build_parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    known = {flag for action in serve._actions for flag in action.option_strings}
    for arg in argv:
        if arg == "--":
            return None
        if arg.startswith("-") and arg.partition("=")[0] not in known and not _number(arg):
            return arg
    return None


def tritonserver() -> int:
    """The ``tritonserver`` command: ``inferd serve`` under the reference's name, so that a launch
    script or an entrypoint that runs ``tritonserver --model-repository=...`` runs inferd. An
    unknown flag is refused as the reference refuses it: ``tritonserver: unrecognized option
    '--x'``, the usage, exit status 1."""
    bad = unknown_option(sys.argv[1:])
    if bad is not None:
        print(f"tritonserver: unrecognized option '{bad}'", file=sys.stderr)
        print(_USAGE.replace("%(prog)s", "Usage: tritonserver"), file=sys.stderr)
        print("(tritonserver --help lists every flag)", file=sys.stderr)
        return 1
    sys.argv[1:1] = ["serve"]
    return main()


if __name__ == "__main__":
    sys.exit(main())
