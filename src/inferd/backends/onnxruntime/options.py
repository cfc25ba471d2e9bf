"""Session options of the ONNX Runtime backend, from the config's ``parameters`` and ``optimization``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import onnxruntime as ort

from inferd.backends.native import available_cpus, default_intra_op_threads
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

#: ``optimization { graph { level } }`` -> ONNX Runtime's level (Triton's mapping; 0 = all)
_GRAPH_LEVELS = {
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    0: ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


# --------------------------------------------------------------------------------------------------
# Session options


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """What an instance's InferenceSession is made with (all from the config; see session_settings)."""

    intra_op_threads: int
    inter_op_threads: int
    parallel: bool
    graph_level: int
    mem_arena: bool | None = None
    mem_pattern: bool | None = None
    config_entries: tuple[tuple[str, str], ...] = ()
    run_entries: tuple[tuple[str, str], ...] = ()
    cpu_accelerators: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    gpu_accelerators: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    #: the config's parameters (a KIND_GPU instance reads its CUDA options from some: providers.py)
    parameters: tuple[tuple[str, str], ...] = ()
    #: the first instance's intra-op threads, not spinning (0: as the others); see wide_first_instance
    first_intra_op_threads: int = 0


_SPINNING = "session.intra_op.allow_spinning"


def wide_first_instance(cpus: int, instances: int) -> int:
    """The first instance's intra-op threads when the config sets none: every core (0: no change).

    With the cores shared out, one request at a time gets ``cpus / instances`` of them: DenseNet-121
    at concurrency 1 ran at 0.7x a default InferenceSession (2 cores, 2 instances). So the first
    instance gets every core, with its threads not spinning (a spinning pool would burn the cores
    the other instances need under load), and the pool hands work to the lowest idle instance
    (scheduling/instances.py): alone, a request runs on every core; under load, the other instances
    join with their share. Measured on 2 cores (benchmarks, bare sessions, infer/s, 3 rounds):
    concurrency 1, 16.3-17.1 against 14.9-16.5 for a default session and 11.2-11.8 shared out;
    concurrency 4, 14.6-16.4 against 12.9-14.7 shared out and 7.3-8.6 for a default session.
    ONNX Runtime's global thread pool (one pool for every session) was as fast at concurrency 1 and
    slower under load (10.7-13.8).
    """
    return cpus if instances > 1 and cpus > default_intra_op_threads(cpus, instances) else 0


def _parse_bool(key: str, value: str) -> bool:
    v = value.strip().lower()
    if v in _TRUE:
        return True
    if v in _FALSE:
        return False
    raise InvalidArgumentError(f"failed to convert '{value}' to a boolean for parameter '{key}'")


def _parse_int(key: str, value: str) -> int:
    try:
        return int(value.strip())
    except ValueError:
        raise InvalidArgumentError(
            f"failed to convert '{value}' to an integer for parameter '{key}'"
        ) from None


def _accelerators(items: Any) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    return tuple((a.name, tuple(sorted(a.parameters.items()))) for a in items)


def session_settings(config: ModelConfig, instances: int, cpus: int | None = None) -> SessionSettings:
    """Session options from ``parameters`` and ``optimization`` (Triton's keys, plus ``session.*``).

    ``intra_op_thread_count`` / ``inter_op_thread_count`` (0 or absent: the cores shared among the
    ``instances``; inter-op threads only count with ``execution_mode`` 1), ``execution_mode`` (0
    sequential, 1 parallel), ``enable_mem_arena``, ``enable_mem_pattern``,
    ``memory.enable_memory_arena_shrinkage`` (a run option), any ``session.*`` key as a session
    config entry (``session.intra_op.allow_spinning`` ...), ``optimization.graph.level`` (-1 basic,
    1 extended, 2 none, else all) and ``optimization.execution_accelerators``.
    """
    cpus = available_cpus() if cpus is None else cpus
    params = {k: v.string_value for k, v in config.parameters.items()}
    intra = _parse_int("intra_op_thread_count", params.get("intra_op_thread_count", "0"))
    inter = _parse_int("inter_op_thread_count", params.get("inter_op_thread_count", "0"))
    mode = _parse_int("execution_mode", params.get("execution_mode", "0"))
    if mode not in (0, 1):
        raise InvalidArgumentError(
            "Invalid configuration value provided. Expected values for  execution_mode are 0 or 1 but got "
            f"{mode} ."
        )
    first = 0
    if intra <= 0:
        intra = default_intra_op_threads(cpus, instances)
        first = wide_first_instance(cpus, instances)
    if inter <= 0:
        inter = 1 if mode == 0 else default_intra_op_threads(cpus, instances)
    entries = {k: v for k, v in params.items() if k.startswith("session.")}
    run_entries = {k: v for k, v in params.items() if k.startswith("memory.")}
    opt = config.optimization
    level = int(opt.graph.level) if opt.HasField("graph") else 0
    return SessionSettings(
        intra_op_threads=intra,
        inter_op_threads=inter,
        parallel=mode == 1,
        graph_level=level if level in _GRAPH_LEVELS else 0,
        mem_arena=_parse_bool("enable_mem_arena", params["enable_mem_arena"])
        if "enable_mem_arena" in params
        else None,
        mem_pattern=_parse_bool("enable_mem_pattern", params["enable_mem_pattern"])
        if "enable_mem_pattern" in params
        else None,
        config_entries=tuple(sorted(entries.items())),
        run_entries=tuple(sorted(run_entries.items())),
        cpu_accelerators=_accelerators(opt.execution_accelerators.cpu_execution_accelerator),
        gpu_accelerators=_accelerators(opt.execution_accelerators.gpu_execution_accelerator),
        parameters=tuple(sorted(params.items())),
        first_intra_op_threads=first,
    )


def intra_op_threads(s: SessionSettings, first: bool) -> int:
    """The intra-op threads of an instance's session (``first``: the model's first instance)."""
    return s.first_intra_op_threads if first and s.first_intra_op_threads else s.intra_op_threads


def session_options(s: SessionSettings, first: bool = False) -> Any:
    """An ``ort.SessionOptions`` for ``s`` (``first``: the model's first instance)."""
    o = ort.SessionOptions()
    o.intra_op_num_threads = intra_op_threads(s, first)
    if first and s.first_intra_op_threads and all(k != _SPINNING for k, _ in s.config_entries):
        o.add_session_config_entry(_SPINNING, "0")
    o.inter_op_num_threads = s.inter_op_threads
    o.execution_mode = ort.ExecutionMode.ORT_PARALLEL if s.parallel else ort.ExecutionMode.ORT_SEQUENTIAL
    o.graph_optimization_level = _GRAPH_LEVELS[s.graph_level]
    if s.mem_arena is not None:
        o.enable_cpu_mem_arena = s.mem_arena
    if s.mem_pattern is not None:
        o.enable_mem_pattern = s.mem_pattern
    o.log_severity_level = 3  # errors only: ORT's warnings go to stderr, unformatted
    for k, v in s.config_entries:
        o.add_session_config_entry(k, v)
    return o
