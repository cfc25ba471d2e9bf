"""The rate limiter (``--rate-limit execution_count``): which instance, of every model, executes next.

Triton core's ``RateLimiter`` (src/rate_limiter.cc) as the instance pools use it. Each instance
registers what its group's ``rate_limiter`` asks for: ``resources`` (a name and a count, per device
unless ``global``) and a ``priority``. An instance with work is *staged*; staged instances are granted
in order of ``exec_count * max(priority, 1)`` (the fewest executions, weighted, first: priority 2 gets
half the turns of priority 1), each only when every resource it asks for is free, and it holds them
for its execute. The order is strict, as the reference's: an instance waits behind one ahead of it
that its resources cannot fit yet, even a model's instance that asks for nothing.

Server-wide counts: per device (``-1``: every device) and global, from ``--rate-limit-resource``, or
by default the most any registered instance asks for. With explicit counts, a resource an instance
asks for but the flags do not list counts 0: the reference refuses such a model at load, with its
text, as it refuses one asking for more than a listed count or naming one resource both global and
per device.

One difference on purpose: the reference tries only the first staged instance when something is
staged or released, so a release that frees room for two may grant one; here every staged instance
that fits, in order, is granted at once.

``--rate-limit off`` (the default) registers nothing: the pools never call the limiter.

Instances come and go with their model, and with an ``instance_group`` update made in place
(engine/instance_update.py): the added ones register (the update fails, with the reference's text, when
the counts cannot fit them), the removed ones leave once their worker stopped. Each registration and
removal recomputes the server's counts and, at ``--log-verbose 1``, logs them as the reference's
``UpdateResourceLimits`` does (``Max Resource Map===>``, then each device's resources).
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from inferd.backends.base import instance_devices
from inferd.errors import InvalidArgumentError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig, ModelRateLimiter

log = logging.getLogger("inferd.scheduling")
#: inferd.logs.VERBOSE1 (--log-verbose 1); scheduling sits below inferd.logs, so the level by value
VERBOSE1 = logging.DEBUG

#: the device key of global resources, and of counts given for every device (the reference's keys)
GLOBAL = -2
PER_DEVICE = -1
SIZE_T = (1 << 64) - 1

#: device key -> resource name -> count
ResourceMap = dict[int, dict[str, int]]

MODES = ("execution_count", "off")


class RateLimiterError(InvalidArgumentError):
    """A flag the reference refuses at start (its text, ``Bad option`` included)."""


def parse_mode(text: str) -> bool:
    """``--rate-limit``: True for ``execution_count`` (any case), False for ``off``."""
    mode = text.lower()
    if mode not in MODES:
        raise RateLimiterError('Bad option: "--rate-limit".\ninvalid argument for --rate-limit')
    return mode == "execution_count"


def parse_resource(arg: str, to_int: Callable[[str], int]) -> tuple[str, int, int]:
    """``--rate-limit-resource <name>:<count>[:<device>]`` as (name, count, device; -1 every device).

    ``to_int`` is the reference's ``ParseOption<int>`` (its texts for a value it cannot read). Names
    keep their case, as the reference's parser does (it lowers a copy it never uses)."""
    fmt = (
        "--rate-limit-resource option format is '<resource_name>:<count>:<device>' or "
        f"'<resource_name>:<count>'. Got {arg}"
    )
    parts = arg.split(":")
    try:
        if len(parts) == 3:
            name, count, device = parts[0], to_int(parts[1]), to_int(parts[2])
        elif len(parts) == 2:
            name, count, device = parts[0], to_int(parts[1]), PER_DEVICE
        else:
            raise InvalidArgumentError(fmt)
    except InvalidArgumentError as e:
        raise RateLimiterError(f'Bad option: "--rate-limit-resource".\n{e.message}') from None
    return name, count, device


def explicit_resources(flags: Iterable[str], to_int: Callable[[str], int]) -> ResourceMap:
    """The counts the flags give (a resource named twice for one device keeps the smaller count;
    a negative count wraps to a huge one, as the reference's ``size_t``)."""
    out: ResourceMap = {}
    for arg in flags:
        name, count, device = parse_resource(arg, to_int)
        counts = out.setdefault(device, {})
        count &= SIZE_T
        counts[name] = min(counts.get(name, count), count)
    return out


def from_flags(mode: str, resources: Iterable[str], to_int: Callable[[str], int]) -> RateLimiter | None:
    """The server's limiter from ``--rate-limit`` and ``--rate-limit-resource`` (the reference's
    refusals, every flag read also when off); None when off."""
    on = parse_mode(mode)
    explicit = explicit_resources(resources, to_int)
    return RateLimiter(explicit) if on else None


@dataclass(eq=False, slots=True)
class InstanceSlot:
    """One registered instance: what it asks for, how often it executed, whether it waits or holds."""

    name: str
    #: device key (GLOBAL or the instance's device) -> name -> count
    resources: ResourceMap
    priority: int
    exec_count: int = 0
    staged: bool = False
    allocated: bool = False
    #: set when the slot is granted (or withdrawn); the waiting worker blocks on it
    ready: threading.Event = field(default_factory=threading.Event)
    withdrawn: bool = False

    def scaled_priority(self) -> int:
        """The reference's ``ScaledPriority``: executions so far times the priority (0 counts as 1)."""
        return self.exec_count * max(self.priority, 1)


def demands(name: str, device: int, config: ModelRateLimiter | None) -> InstanceSlot:
    """The slot of instance ``name`` on ``device`` from its group's ``rate_limiter`` message."""
    resources: ResourceMap = {}
    if config is not None:
        for r in config.resources:
            # ``global`` is a Python keyword: the field is read by name
            resources.setdefault(GLOBAL if getattr(r, "global") else device, {})[r.name] = int(r.count)
    return InstanceSlot(name, resources, 0 if config is None else int(config.priority))


def group_limits(cfg: ModelConfig) -> list[ModelRateLimiter | None]:
    """Each instance's ``rate_limiter`` message, in the order the loader makes the instances (group by
    group, ``count`` on each of its devices); None for the one instance of a config without groups."""
    return [
        g.rate_limiter for g in cfg.instance_group for _ in range(g.count * len(instance_devices(g)))
    ] or [None]


class RateLimiter:
    """The server's one limiter; thread-safe (workers call ``acquire``/``release`` from their threads)."""

    def __init__(self, explicit: ResourceMap | None = None) -> None:
        self._explicit = explicit or {}
        self._lock = threading.Lock()
        self._slots: list[InstanceSlot] = []
        self._limits: ResourceMap = {}
        self._allocated: ResourceMap = {}
        self._staged: list[tuple[int, int, InstanceSlot]] = []  # heap: (scaled priority, order, slot)
        self._order = itertools.count()

    # -- registration (at load and unload) -------------------------------------------------------
    def register(self, slots: list[InstanceSlot]) -> None:
        """Add a model's instances; InvalidArgumentError (the reference's text) when the server's
        counts cannot fit one of them, and then none is added."""
        with self._lock:
            self._slots.extend(slots)
            try:
                self._limits = self._compute_limits()
            except InvalidArgumentError:
                del self._slots[len(self._slots) - len(slots) :]
                self._limits = self._compute_limits()
                self._log_limits()  # as the reference's, once it took the refused instance out again
                raise
            self._log_limits()

    def unregister(self, slots: Iterable[InstanceSlot]) -> None:
        """Remove instances (their model unloads): one still waiting is withdrawn, what one still holds
        (an execute that never returned) is free again."""
        gone = set(map(id, slots))
        with self._lock:
            for s in self._slots:
                if id(s) in gone:
                    s.withdrawn = True
                    s.staged = False
                    if s.allocated:
                        s.allocated = False
                        for key, counts in s.resources.items():
                            for name, count in counts.items():
                                self._allocated[key][name] -= count
                    s.ready.set()
            self._slots = [s for s in self._slots if id(s) not in gone]
            self._staged = [e for e in self._staged if id(e[2]) not in gone]
            heapq.heapify(self._staged)
            self._limits = self._compute_limits()
            self._log_limits()
            self._allocate()

    def _log_limits(self) -> None:
        """(lock held) The counts as the reference's ``UpdateResourceLimits`` logs them at verbose 1:
        devices in order (global ones first, as ``GLOBAL``), resources by name."""
        if not log.isEnabledFor(VERBOSE1):
            return
        text = "\nMax Resource Map===>\n"
        for key in sorted(self._limits):
            counts = self._limits[key]
            if counts:
                text += f"\tDevice: {'GLOBAL' if key == GLOBAL else key}\n"
                text += "".join(f"\t\tResource: {n}\t Count: {counts[n]}\n" for n in sorted(counts))
        log.log(VERBOSE1, "%s", text)

    def _compute_limits(self) -> ResourceMap:
        """The most any instance asks for, per device key; checked against the explicit counts."""
        limits: ResourceMap = {}
        for s in self._slots:
            for key, counts in s.resources.items():
                have = limits.setdefault(key, {})
                for name, count in counts.items():
                    have[name] = max(have.get(name, 0), count)
        if self._explicit:
            for key in sorted(limits):
                for name in sorted(limits[key]):
                    limits[key][name] = self._explicit_count(key, name, limits[key][name])
        for name in sorted(limits.get(GLOBAL, {})):
            if any(name in counts for key, counts in limits.items() if key != GLOBAL):
                raise InvalidArgumentError(
                    f'Resource "{name}" is present as both global and device-specific resource in the '
                    "model configuration."
                )
        return limits

    def _explicit_count(self, key: int, name: str, needed: int) -> int:
        """``ParseAndValidateExplicitResources``: a global resource takes the largest count given for it
        on any device; a device's, the larger of that device's and every device's (-1). None: 0."""
        explicit = self._explicit
        if key == GLOBAL:
            given = [c.get(name, 0) for c in explicit.values()]
        else:
            given = [explicit.get(key, {}).get(name, 0), explicit.get(PER_DEVICE, {}).get(name, 0)]
        count = max(given, default=0)
        if count < needed:
            raise InvalidArgumentError(
                f'Resource count for "{name}" is limited to {count} which will prevent scheduling of one '
                f"or more model instances, the minimum required count is {needed}"
            )
        return count

    # -- scheduling (worker threads) ---------------------------------------------------------------
    def acquire(self, slot: InstanceSlot) -> bool:
        """Stage ``slot`` (unless it is already) and block until it is granted (True) or withdrawn (False)."""
        with self._lock:
            self._stage(slot)
        slot.ready.wait()
        with self._lock:
            return slot.allocated

    def release(self, slot: InstanceSlot, executed: bool = True, again: bool = False) -> None:
        """The execute ended (or the watchdog gave up on it): its resources are free. Idempotent.
        ``executed`` False: the turn went unused (no work was left), it does not count. ``again``: the
        instance has more work and is staged before anyone is granted, as the reference re-stages a
        released instance with pending requests (so that priority decides between it and the others)."""
        with self._lock:
            if not slot.allocated:
                return
            slot.allocated = False
            slot.exec_count += executed
            for key, counts in slot.resources.items():
                held = self._allocated[key]
                for name, count in counts.items():
                    held[name] -= count
            if again:
                self._stage(slot)
            self._allocate()

    def unstage(self, slot: InstanceSlot) -> None:
        """The instance has no work after all (it goes idle): out of the order, or its turn given back."""
        with self._lock:
            if slot.staged:
                self._drop(slot)
        self.release(slot, executed=False)

    def withdraw(self, slot: InstanceSlot) -> None:
        """Stop ``slot`` waiting (its pool stops): ``acquire`` returns False, now and later."""
        with self._lock:
            slot.withdrawn = True
            if slot.staged:
                self._drop(slot)
            slot.ready.set()

    def _stage(self, slot: InstanceSlot) -> None:
        """(lock held) Into the order, by its weighted executions; granted at once if it is first and fits."""
        if slot.staged or slot.allocated or slot.withdrawn:
            if slot.withdrawn:
                slot.ready.set()
            return
        slot.ready.clear()
        slot.staged = True
        heapq.heappush(self._staged, (slot.scaled_priority(), next(self._order), slot))
        self._allocate()

    def _drop(self, slot: InstanceSlot) -> None:
        """(lock held) Out of the order; whoever was behind it may go now."""
        slot.staged = False
        self._staged = [e for e in self._staged if e[2] is not slot]
        heapq.heapify(self._staged)
        self._allocate()

    def _allocate(self) -> None:
        """Grant staged slots in order while the first one fits (lock held)."""
        staged = self._staged
        while staged:
            slot = staged[0][2]
            if not self._fits(slot):
                return
            heapq.heappop(staged)
            slot.staged = False
            slot.allocated = True
            for key, counts in slot.resources.items():
                held = self._allocated.setdefault(key, {})
                for name, count in counts.items():
                    held[name] = held.get(name, 0) + count
            slot.ready.set()

    def _fits(self, slot: InstanceSlot) -> bool:
        for key, counts in slot.resources.items():
            held = self._allocated.get(key, {})
            limit = self._limits.get(key, {})
            for name, count in counts.items():
                if held.get(name, 0) + count > limit.get(name, 0):
                    return False
        return True

    # -- what tests and the status look at ---------------------------------------------------------
    def limits(self) -> ResourceMap:
        with self._lock:
            return {k: dict(v) for k, v in self._limits.items()}

    def held(self) -> ResourceMap:
        with self._lock:
            return {
                k: {n: c for n, c in v.items() if c} for k, v in self._allocated.items() if any(v.values())
            }


class Gate:
    """A pool's instances in the limiter, by the pool's instance index."""

    __slots__ = ("limiter", "slots")

    def __init__(self, limiter: RateLimiter, slots: list[InstanceSlot]) -> None:
        self.limiter = limiter
        self.slots = slots

    def acquire(self, index: int) -> bool:
        return self.limiter.acquire(self.slots[index])

    def release(self, index: int, executed: bool = True, again: bool = False) -> None:
        self.limiter.release(self.slots[index], executed, again)

    def turn(self, index: int, lock: threading.Lock, has_work: Callable[[], bool]) -> bool:
        """Instance ``index``'s turn, waited for with its pool's ``lock`` (held) let go meanwhile. False:
        withdrawn, or ``has_work()`` says nothing is left for it (another worker took the requests, the
        pool stops); the turn then goes back unused."""
        lock.release()
        try:
            granted = self.acquire(index)
        finally:
            lock.acquire()
        if granted and has_work():
            return True
        if granted:
            self.release(index, executed=False)
        return False

    def unstage(self, index: int) -> None:
        self.limiter.unstage(self.slots[index])

    def withdraw(self) -> None:
        """The pool stops: workers waiting for a turn stop waiting."""
        for s in self.slots:
            self.limiter.withdraw(s)

    def close(self) -> None:
        """The pool's instances unloaded: the server's counts no longer include them."""
        self.limiter.unregister(self.slots)

    def extend(self, other: Gate) -> None:
        """Instances an update added to the pool (``admit`` registered them): at its next indices."""
        self.slots.extend(other.slots)

    def retire(self, indices: Iterable[int]) -> None:
        """Instances an update removes: their workers stop waiting for a turn (and take none again)."""
        for i in indices:
            self.limiter.withdraw(self.slots[i])

    def leave(self, indices: Iterable[int]) -> None:
        """Retired instances unloaded: the server's counts no longer include them."""
        self.limiter.unregister([self.slots[i] for i in indices])

    def split(self) -> list[Gate]:
        """One gate per instance (a sequence batcher runs a pool per instance)."""
        return [Gate(self.limiter, [s]) for s in self.slots]


@contextlib.contextmanager
def held(gate: Gate | None, index: int) -> Iterator[None]:
    """Instance ``index``'s resources held for a step of its load (``initialize``, warmup), as the
    reference sends those through the rate limiter too; the turn does not count as an execution."""
    if gate is None or not gate.acquire(index):
        yield
        return
    try:
        yield
    finally:
        gate.release(index, executed=False)


def open_gate(limiter: RateLimiter | None, cfg: ModelConfig, instances: list[tuple[str, int]]) -> Gate | None:
    """Register a model's instances (name, device) with their group's ``rate_limiter``; None when the
    limiter is off. InvalidArgumentError (the reference's text) when the server's counts cannot fit one."""
    return admit(
        limiter,
        [
            (name, device, config)
            for (name, device), config in zip(instances, group_limits(cfg), strict=False)
        ],
    )


def admit(
    limiter: RateLimiter | None, instances: list[tuple[str, int, ModelRateLimiter | None]]
) -> Gate | None:
    """Register instances (name, device, their group's ``rate_limiter`` message or None); None when the
    limiter is off. InvalidArgumentError (the reference's text) when the server's counts cannot fit one,
    and then none is registered."""
    if limiter is None:
        return None
    slots = [demands(name, device, config) for name, device, config in instances]
    limiter.register(slots)
    return Gate(limiter, slots)
