"""tritonserver 2.51's flags that are no field of ServerOptions: accepted, so that command lines written
for Triton (launch scripts, container entrypoints, Helm charts) start inferd unchanged.

Two kinds:

- **ignored**: what the flag sizes or switches does not exist here (a CUDA pool without a GPU, the
  thread pools of front ends served on the event loop). The flag is parsed with the reference's type,
  so a malformed value still stops the start, and each one given is logged once at start as ignored,
  with why (``IGNORED``: docs/how-to/moving-from-triton.md's table is written from it);
- **deprecated trace flags** (``--trace-file``, ``--trace-level``, ``--trace-rate``, ``--trace-count``,
  ``--trace-log-frequency``): they mean what the reference's do, a ``--trace-config`` setting each,
  which a ``--trace-config`` of the same setting overrides (levels are OR-ed), as the reference.

``cli.build_parser`` adds them to ``serve`` and ``serve-ray``; ``cli.main`` calls :func:`apply`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["DEPRECATED_TRACE", "IGNORED", "CompatFlag", "add_arguments", "apply"]


@dataclass(frozen=True, slots=True)
class CompatFlag:
    """One tritonserver flag: its name, its value's type (``bool``: ``--flag[=BOOL]``), whether it may
    repeat, and why inferd has nothing to do with it (or, for a trace flag, its ``--trace-config``
    setting)."""

    flag: str
    kind: type
    why: str
    repeatable: bool = False

    @property
    def dest(self) -> str:
        return "compat_" + self.flag.removeprefix("--").replace("-", "_")


_NO_GPU = "inferd runs on the CPU: "

#: flags accepted and ignored, with why (docs/how-to/moving-from-triton.md, "Flags that change nothing here", lists them)
IGNORED: tuple[CompatFlag, ...] = (
    CompatFlag(
        "--repoagent-directory",
        str,
        "repository agents are Python (checksum built in, others through the inferd.repoagents entry point); "
        "C agent libraries (libtritonrepoagent_*.so) are not loaded",
    ),
    CompatFlag("--cache-directory", str, "the response cache is built in (--cache-config local,size=N)"),
    CompatFlag("--buffer-manager-thread-count", int, "tensors stay in host memory: no buffer manager"),
    CompatFlag("--pinned-memory-pool-byte-size", int, _NO_GPU + "no pinned memory pool"),
    CompatFlag("--cuda-memory-pool-byte-size", str, _NO_GPU + "no CUDA memory pool", repeatable=True),
    CompatFlag("--cuda-virtual-address-size", str, _NO_GPU + "no CUDA address space", repeatable=True),
    CompatFlag("--enable-peer-access", bool, _NO_GPU + "no GPU peer access"),
    CompatFlag("--model-load-gpu-limit", str, _NO_GPU + "no GPU memory to limit", repeatable=True),
    CompatFlag(
        "--host-policy",
        str,
        "NUMA host policies are not applied (pin the process with numactl, taskset or Kubernetes' CPU manager)",
        repeatable=True,
    ),
    CompatFlag("--http-thread-count", int, "HTTP is served on the event loop: no thread pool to size"),
    CompatFlag("--grpc-infer-allocation-pool-size", int, "no pool of gRPC response allocations to size"),
    CompatFlag(
        "--sagemaker-thread-count", int, "SageMaker's API is served on the event loop: no thread pool to size"
    ),
    CompatFlag(
        "--vertex-ai-thread-count", int, "Vertex AI's API is served on the event loop: no thread pool to size"
    ),
)

#: the reference's deprecated trace flags and the ``--trace-config`` setting each stands for
DEPRECATED_TRACE: tuple[CompatFlag, ...] = (
    CompatFlag("--trace-file", str, "triton,file="),
    CompatFlag("--trace-level", str, "level=", repeatable=True),
    CompatFlag("--trace-rate", int, "rate="),
    CompatFlag("--trace-count", int, "count="),
    CompatFlag("--trace-log-frequency", int, "triton,log-frequency="),
)


def add_arguments(parser: argparse.ArgumentParser, parse_bool: Callable[[str], bool]) -> None:
    """The compat flags, in groups of their own; absent from the parsed namespace unless given."""
    ignored = parser.add_argument_group(
        "Triton compatibility: flags accepted and ignored", "each one given is logged at start with why"
    )
    for f in IGNORED:
        _add(ignored, f, f"ignored: {f.why}", parse_bool)
    trace = parser.add_argument_group(
        "Triton compatibility: deprecated trace flags", "each one a --trace-config setting"
    )
    for f in DEPRECATED_TRACE:
        _add(trace, f, f"deprecated: --trace-config {f.why}VALUE", parse_bool)


def _add(group: Any, f: CompatFlag, help: str, parse_bool: Callable[[str], bool]) -> None:
    kwargs: dict[str, Any] = {"dest": f.dest, "default": argparse.SUPPRESS, "help": help}
    if f.kind is bool:
        kwargs.update(type=parse_bool, nargs="?", const=True, metavar="BOOL")
    else:
        kwargs.update(type=f.kind, metavar="VALUE")
    if f.repeatable:
        kwargs["action"] = "append"
    group.add_argument(f.flag, **kwargs)


def apply(args: argparse.Namespace) -> list[str]:
    """Fold the deprecated trace flags given into ``args.trace_config`` (before the ``--trace-config``
    settings, which override them) and return the log lines (warnings) of the compat flags given."""
    settings: list[str] = []
    lines: list[str] = []
    for f in DEPRECATED_TRACE:
        if hasattr(args, f.dest):
            value = getattr(args, f.dest)
            read = [f"{f.why}{v}" for v in (value if f.repeatable else [value])]
            lines += [f"{f.flag} is deprecated: read as --trace-config {r}" for r in read]
            settings += read
            delattr(args, f.dest)
    if settings:
        args.trace_config = [*settings, *args.trace_config]
    for f in IGNORED:
        if hasattr(args, f.dest):
            value = getattr(args, f.dest)
            shown = ",".join(str(v) for v in value) if f.repeatable else value
            lines.append(f"ignoring {f.flag}={shown}: {f.why}")
            delattr(args, f.dest)
    return lines
