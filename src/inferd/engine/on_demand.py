"""Load on demand under a memory budget (``--model-memory-budget``, explicit mode; beyond the reference).

A request for a model of the repositories that is not loaded loads it first; requests for the
same model wait on one load. When the models would use more than the budget, the least recently
used idle ones (no request queued or executing, nor in an ensemble that uses them) are unloaded,
oldest first, with their ensembles.

How a model's memory is measured: the resident memory (RSS, ``/proc/self/statm``) the server
process gained across the model's load, read before and after under ModelControl's lock (one
load at a time), plus the RSS of the worker processes of its Python instances
(``execution_mode: process`` or ``auto``), read each time the budget is checked. The in-process
figure is the largest measured across the model's loads in this run: an allocator that keeps freed
memory makes a reload look smaller than it is. What other threads allocate during a load is
counted too, and memory shared by several models (a framework imported by the first) is charged
to the first. Before a model's first load its size is guessed from its files on disk, so room is
made first; after the load the measured size is what counts, and a model larger than the whole
budget is unloaded again with an error naming both sizes (the next request gets that error at
once, without loading it).
"""

from __future__ import annotations

import asyncio
import collections
import gc
import logging
import os
import re
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path

from inferd.backends.base import WorkerProcesses
from inferd.engine.lifecycle import ModelLifecycle
from inferd.errors import InvalidArgumentError

log = logging.getLogger("inferd.repository")

_UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?)\s*([A-Za-z]*)\s*")
FLAG = "--model-memory-budget"
try:
    _PAGE = os.sysconf("SC_PAGE_SIZE")
except (ValueError, OSError, AttributeError):  # not POSIX: statm is not there either
    _PAGE = 4096


def parse_size(text: str) -> int:
    """Bytes from ``2GiB``, ``512MiB``, ``64KiB``, ``100B`` or a plain number of bytes."""
    m = _SIZE.fullmatch(text)
    if m is None or m.group(2) not in _UNITS:
        raise InvalidArgumentError(
            f"{FLAG}: '{text}' is not a size: give bytes, or a number with B, KiB, MiB, GiB or TiB "
            "(for example 2GiB)"
        )
    value = int(float(m.group(1)) * _UNITS[m.group(2)])
    if value <= 0:
        raise InvalidArgumentError(f"{FLAG}: the budget must be more than 0 bytes, got '{text}'")
    return value


def budget_from_options(text: str | None, mode: str) -> int | None:
    """The budget in bytes (None: no budget); refused outside explicit mode."""
    if text is None:
        return None
    if mode != "explicit":
        raise InvalidArgumentError(
            f"{FLAG} requires --model-control-mode=explicit (models load on demand and are unloaded "
            f"to fit; in '{mode}' mode the server decides what is loaded)"
        )
    return parse_size(text)


def format_size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def rss_bytes(pid: int | str = "self") -> int:
    """Resident memory of a process (0 where ``/proc`` cannot tell)."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def worker_bytes(processes: WorkerProcesses, name: str) -> int:
    """Resident memory of the worker processes of model ``name``'s instances (the server's
    ``processes``: backends/base.py)."""
    return sum(rss_bytes(pid) for pid in processes.pids(name))


def files_bytes(path: Path) -> int:
    """The size of a model's files: the guess of its memory before its first load."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except OSError:
                continue
    return total


#: ModelControl's unload of one model (its ensembles too), lock held
Evict = Callable[[str], Awaitable[None]]


class MemoryBudget:
    """What is loaded, what it measured, and in which order it was used (see the module docstring)."""

    def __init__(
        self,
        limit: int,
        registry: ModelLifecycle,
        workers: Callable[[str], int],
        measure: Callable[[], int] = rss_bytes,
    ) -> None:
        """``workers``: a model's bytes in worker processes (``worker_bytes`` of the server's)."""
        self.limit = limit
        self._registry = registry
        self._measure = measure
        self._workers = workers
        #: model name -> bytes the server process gained across its load (the largest measured)
        self.sizes: dict[str, int] = {}
        #: model names, least recently used first (a request or a load moves one to the end)
        self._lru: collections.OrderedDict[str, None] = collections.OrderedDict()
        #: model name -> times it was unloaded to make room
        self.evictions: collections.Counter[str] = collections.Counter()
        #: model name -> its load on demand in progress (requests for it wait on this one)
        self._pending: dict[str, asyncio.Future[None]] = {}

    # -- requests ------------------------------------------------------------------------------------
    def touch(self, name: str) -> None:
        """``name`` was used now."""
        lru = self._lru
        if name in lru:
            lru.move_to_end(name)
        else:
            lru[name] = None

    async def ensure_loaded(self, name: str, load: Callable[[str], Awaitable[None]]) -> None:
        """Load ``name`` (``load``: ModelControl.load_if_needed) unless a load of it is under way,
        then wait for that one."""
        pending = self._pending.get(name)
        if pending is None:
            pending = asyncio.ensure_future(self._load_once(name, load))
            self._pending[name] = pending

            def done(f: asyncio.Future[None]) -> None:
                self._pending.pop(name, None)
                if not f.cancelled():
                    f.exception()  # retrieved: each waiter got it

            pending.add_done_callback(done)
        await asyncio.shield(pending)

    async def _load_once(self, name: str, load: Callable[[str], Awaitable[None]]) -> None:
        known = self.sizes.get(name)
        if known is not None and known > self.limit:
            raise self.too_big(name, known)
        log.info("loading '%s' on demand", name)
        await load(name)

    def too_big(self, name: str, size: int) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"load failed for model '{name}': it needs {format_size(size)} of memory (measured when it "
            f"loaded), more than the whole {FLAG} of {format_size(self.limit)}"
        )

    # -- ModelControl's hooks (its lock held) ---------------------------------------------------------
    async def before_load(self, name: str, path: Path, keep: set[str], evict: Evict) -> int:
        """Make room for ``name`` (its last measured size, else its files' size); the RSS now, from
        which its load is measured."""
        need = self.sizes.get(name)
        if need is None:
            need = await asyncio.to_thread(files_bytes, path)
        await self.fit(keep | {name}, evict, extra=need, why=name)
        return self._measure()

    def loaded(self, name: str, baseline: int) -> None:
        """``name`` loaded since ``baseline``: its size recorded; a model over the whole budget
        raises (the caller unloads it)."""
        grown = max(0, self._measure() - baseline)
        self.sizes[name] = size = max(self.sizes.get(name, 0), grown)
        total = size + self._workers(name)
        log.info("'%s' uses %s of memory (%s)", name, format_size(total), FLAG)
        if total > self.limit:
            self.sizes[name] = max(size, total)  # refused at once from now on
            raise self.too_big(name, total)

    def model_bytes(self, name: str) -> int:
        return self.sizes.get(name, 0) + self._workers(name)

    def used(self) -> int:
        """Bytes the READY models use."""
        return sum(self.model_bytes(n) for n in self._registry.models if self._registry.is_ready(n))

    async def fit(self, keep: Iterable[str], evict: Evict, extra: int = 0, why: str = "") -> None:
        """Unload least recently used idle models (not ``keep``) until what is loaded, plus ``extra``
        bytes, fits the budget."""
        keep = set(keep)
        used = self.used()
        if used + extra <= self.limit:
            return
        freed = False
        for victim in list(self._lru):
            if used + extra <= self.limit:
                break
            if victim in keep or not self._evictable(victim):
                continue
            size = self.model_bytes(victim)
            log.info(
                "unloading '%s' (%s, least recently used) to make room%s: %s of %s in use",
                victim,
                format_size(size),
                f" for '{why}'" if why else "",
                format_size(used),
                format_size(self.limit),
            )
            await evict(victim)
            self._lru.pop(victim, None)
            self.evictions[victim] += 1
            freed = True
            used = self.used()
        if freed:
            gc.collect()  # an unloaded model's cycles go now, not at the next collection
        if used + extra > self.limit:
            log.warning(
                "%s exceeded: %s in use%s, no idle model left to unload",
                FLAG,
                format_size(used),
                f" and '{why}' to load" if why else "",
            )

    def _evictable(self, name: str) -> bool:
        """A READY model that is not an ensemble, with nothing in flight in it nor in an ensemble
        that uses it."""
        versions = self._registry.models.get(name, {})
        live = [m for m in versions.values() if m.ready and m.scheduler is not None]
        if not live or any(m.platform == "ensemble" for m in live):
            return False
        if any(m.scheduler is not None and m.scheduler.inflight() for m in live):
            return False
        for other in self._registry.models.values():
            for m in other.values():
                cfg = m.config
                if (
                    m.platform == "ensemble"
                    and m.scheduler is not None
                    and m.scheduler.inflight()
                    and any(s.model_name == name for s in cfg.ensemble_scheduling.step)
                ):
                    return False
        return True

    def forget(self, name: str) -> None:
        """``name`` was unloaded (the repository API)."""
        self._lru.pop(name, None)

    # -- metrics -------------------------------------------------------------------------------------
    def metric_lines(self) -> list[str]:
        """Prometheus families: the budget, each loaded model's measured memory, evictions."""
        out = [
            "# HELP inferd_model_memory_budget_bytes The --model-memory-budget",
            "# TYPE inferd_model_memory_budget_bytes gauge",
            f"inferd_model_memory_budget_bytes {self.limit}",
            "# HELP inferd_model_memory_bytes Memory a loaded model uses, as the budget measures it",
            "# TYPE inferd_model_memory_bytes gauge",
        ]
        for name in sorted(self._registry.models):
            if self._registry.is_ready(name):
                out.append(f'inferd_model_memory_bytes{{model="{_label(name)}"}} {self.model_bytes(name)}')
        out += [
            "# HELP inferd_model_evictions_total Models unloaded to fit the memory budget",
            "# TYPE inferd_model_evictions_total counter",
        ]
        for name, count in sorted(self.evictions.items()):
            out.append(f'inferd_model_evictions_total{{model="{_label(name)}"}} {count}')
        return out


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
