"""Models whose files a client uploaded (a repository load with ``file:`` overrides): read and run in
worker processes only, whatever their config asks.

A client that uploads a model writes its files and its config. Its ``model.py`` is code; its
``model.onnx``, Treelite or SavedModel file is input to a native parser. Either can crash the process
that reads it, grow it without bound or never finish. So, for every backend:

- its auto-complete (which imports ``model.py`` or opens the model file) runs in a short-lived worker
  (``complete_in_worker``), and its load, ``initialize`` and executes in worker processes
  (``contained_model``). The config's ``execution_mode: thread`` is not honoured: the uploader wrote it;
- each worker is held to a memory limit the operator sets, not the uploader: ``--backend-config=
  uploaded-memory-limit-bytes=N`` (for every backend, or ``<backend>,uploaded-memory-limit-bytes=N``),
  ``DEFAULT_MEMORY_LIMIT`` without one, 0 for none; the config's ``memory_limit_bytes`` may only
  lower it. Past it the worker is killed, while it loads too (``spawn.Starting``);
- its load has a deadline: ``--model-load-timeout-secs``, or ``DEFAULT_LOAD_TIMEOUT_S`` where that
  is 0 (no limit), enforced by killing its workers (``LoadAbort``), so that a load that hangs ends,
  answers, and releases its processes, threads, shared memory and folder.

What this is not: a sandbox. A worker runs as the server's user; it contains crashes, leaks and
hangs, not code written to attack the server (which can signal the server's process like any
process of that user). Who may upload is the repository API's access control.
"""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inferd.backends.base import LoadContext
from inferd.backends.process.ipc import ChannelClosed
from inferd.backends.process.model import ProcessModel
from inferd.backends.process.spawn import Starting, how_it_ended, start_worker
from inferd.backends.tritonc.search import backend_directory
from inferd.errors import ErrorCode, InvalidArgumentError, UnavailableError, error_for_code

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

log = logging.getLogger("inferd.process")

#: the ``--backend-config`` setting of an uploaded model's worker memory limit (bytes; 0: none)
MEMORY_LIMIT_SETTING = "uploaded-memory-limit-bytes"
#: without the setting: room for a Python model importing torch or a few-hundred-MiB graph (measured
#: idle: a Python model's worker 44 MiB of resident memory, an ONNX Runtime worker with a small graph 72 MiB)
DEFAULT_MEMORY_LIMIT = 2 << 30
#: an uploaded model's load deadline where --model-load-timeout-secs is 0 (none): that flag's default
DEFAULT_LOAD_TIMEOUT_S = 600.0
_MIB = 1 << 20


@dataclasses.dataclass(slots=True, frozen=True)
class UploadLimits:
    """What an uploaded model's workers are held to: resident memory (bytes; 0: none) and the
    seconds its auto-complete and its load each may take (always finite)."""

    memory_limit: int = DEFAULT_MEMORY_LIMIT
    load_timeout_s: float = DEFAULT_LOAD_TIMEOUT_S


def upload_limits(backend_config: Mapping[str, str], load_timeout_s: float) -> UploadLimits:
    """The operator's limits for an uploaded model: ``backend_config`` is its backend's
    ``--backend-config`` settings (the global ones included), ``load_timeout_s`` the server's
    ``--model-load-timeout-secs``."""
    text = backend_config.get(MEMORY_LIMIT_SETTING)
    limit = DEFAULT_MEMORY_LIMIT
    if text is not None:
        try:
            limit = int(text.strip())
        except ValueError:
            limit = -1
        if limit < 0:
            raise InvalidArgumentError(
                f"--backend-config {MEMORY_LIMIT_SETTING} must be a number of bytes (0: no limit), got '{text}'"
            )
    return UploadLimits(limit, load_timeout_s if load_timeout_s > 0 else DEFAULT_LOAD_TIMEOUT_S)


def _own_limit(ctx: LoadContext) -> int:
    """The uploaded config's own ``memory_limit_bytes`` (0: none or not a number of bytes)."""
    param = ctx.config.parameters.get("memory_limit_bytes")
    try:
        return max(0, int(param.string_value)) if param is not None else 0
    except ValueError:
        return 0


def contained_model(ctx: LoadContext, limits: UploadLimits, deadline: float) -> ProcessModel:
    """The model of ``ctx`` (uploaded) with its instances in worker processes, each started by
    ``deadline`` (monotonic seconds) and killed past the memory limit."""
    limit, name = limits.memory_limit, MEMORY_LIMIT_SETTING
    own = _own_limit(ctx)
    if own and (not limit or own < limit):  # the uploader may ask for less, never for more
        limit, name = own, "memory_limit_bytes"
    mode = ctx.config.parameters.get("execution_mode")
    if mode is not None and mode.string_value != "process":
        log.warning(
            "model '%s': its files were uploaded by a client, so it runs in worker processes; its config's "
            "execution_mode '%s' is not honoured (the uploader wrote that config)",
            ctx.model_name,
            mode.string_value,
        )
    memory = f"{limit / _MIB:.0f} MiB of memory ({name})" if limit else "no memory limit"
    log.info(
        "model '%s' version %d: uploaded files, read and run in worker processes only (%s, %g s to load)",
        ctx.model_name,
        ctx.version,
        memory,
        limits.load_timeout_s,
    )
    contained = dataclasses.replace(ctx, load_timeout_s=limits.load_timeout_s)
    return ProcessModel(contained, limit, name, load_deadline=deadline)


class LoadAbort:
    """One uploaded model version's load: ``fire`` kills the workers it started (its deadline
    passed), and those it starts afterwards."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._models: list[ProcessModel] = []
        self.reason = ""

    def track(self, model: ProcessModel) -> None:
        with self._lock:
            self._models.append(model)
            reason = self.reason
        if reason:
            model.abort(reason)

    def fire(self, reason: str) -> None:
        with self._lock:
            self.reason = reason
            models = list(self._models)
        for model in models:
            model.abort(reason)


def complete_in_worker(
    config: ModelConfig,
    model_dir: Path,
    version_dir: Path | None,
    default_max_batch_size: int,
    limits: UploadLimits,
    log_settings: dict[str, Any] | None = None,
) -> None:
    """The backend's ``auto_complete`` of ``config`` (in place), run in a worker process of its own
    that ends with it: within the load deadline and the memory limit, a crash answered as an
    error."""
    who = f"the auto-complete of model '{config.name}' (backend '{config.backend}')"
    proc, chan = start_worker()
    request = {
        "config": config.SerializeToString(),
        "model_dir": str(model_dir),
        "version_dir": None if version_dir is None else str(version_dir),
        "default_max_batch_size": default_max_batch_size,
        "log_verbose": 1 if log.isEnabledFor(logging.DEBUG) else 0,
        "log": log_settings or {},
        "backend_directory": backend_directory(),
    }
    starting = Starting(
        proc, chan, time.monotonic() + limits.load_timeout_s, limits.memory_limit, MEMORY_LIMIT_SETTING
    )
    try:
        with starting:
            chan.send(("complete", request))
            reply = starting.recv()
    except (ChannelClosed, TimeoutError, OSError) as e:
        proc.kill()
        code = proc.wait()
        if starting.reason:
            raise UnavailableError(f"{who} was killed: {starting.reason}") from e
        if isinstance(e, TimeoutError):
            raise UnavailableError(f"{who} did not finish within {limits.load_timeout_s:g} s") from e
        raise UnavailableError(f"the worker process of {who} ended ({how_it_ended(code)})") from e
    finally:
        chan.close()
    try:
        proc.wait(5.0)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if reply[0] == "init_error":
        code_name, message = reply[1]
        raise error_for_code(ErrorCode[code_name], message)
    config.ParseFromString(reply[1])
