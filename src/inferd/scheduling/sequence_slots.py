"""A sequence batcher's instances and their batch slots (scheduling/sequence.py).

Each instance runs in an InstancePool of its own (its worker, statistics, inline mode, execute
watchdog, cancellation: the same as any model's), whose instance is wrapped (sequence_instance.py).
Each instance has ``slot_count`` batch slots; a free slot goes to a new sequence, the lowest slot
index first, then the lowest instance, so that sequences spread over the instances, as the
reference's.

An ``instance_group`` update (engine/instance_update.py) adds instances with their slots; a removed
instance's slots take no new sequence, and its pool stops once the last of its slots is free of its
sequence (the update does not wait for that). Pools stop one at a time, at a removal as at the stop,
as an InstancePool's instances unload (and the reference's, each in its own stub process): a
model's ``finalize`` may count on not running beside another instance's (Triton's qa
``model_init_del`` counts them in a file under ``lockf``, a lock that threads of one process do not
exclude each other with). Everything here runs on the event loop.
"""

from __future__ import annotations

import asyncio
import heapq
from typing import TYPE_CHECKING

from inferd.scheduling.instances import InstancePool

if TYPE_CHECKING:
    from inferd.scheduling.sequence import Sequence


class Slot:
    """A batch slot of one instance, and the sequence that holds it."""

    __slots__ = ("busy", "index", "number", "pool", "seq")

    def __init__(self, number: int, pool: int, index: int) -> None:
        self.number = number  # its place in the list of slots
        self.pool = pool
        self.index = index
        self.seq: Sequence | None = None
        #: a request of this slot is with the instance and has not had its final response
        self.busy = False


class SequenceSlots:
    """The pools (one per instance) and their slots, which are free, and the removed ones' stops."""

    __slots__ = (
        "_free",
        "_loop",
        "_retired",
        "_retiring",
        "_stops",
        "_unloading",
        "all",
        "pools",
        "slot_count",
    )

    def __init__(self, pools: list[InstancePool], slot_count: int, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.pools = pools
        self.slot_count = slot_count
        pairs = [(i, p) for i in range(slot_count) for p in range(len(pools))]
        self.all = [Slot(n, p, i) for n, (i, p) in enumerate(pairs)]
        #: free slots, the lowest slot index first (then the lowest instance), as the reference
        self._free = [(s.index, s.pool, s.number) for s in self.all]
        heapq.heapify(self._free)
        #: pools of removed instances -> their slots not yet free of their sequences; their stops
        self._retiring: dict[int, int] = {}
        self._retired: set[int] = set()
        self._stops: set[asyncio.Task[None]] = set()
        #: the pools stop one after the other (see the module docstring)
        self._unloading = asyncio.Lock()

    def take(self) -> Slot | None:
        """The lowest free slot, taken (None: every slot is held)."""
        return self.all[heapq.heappop(self._free)[2]] if self._free else None

    def leaving(self, slot: Slot) -> bool:
        """``slot`` was given up by its sequence: True when its instance was removed (the slot goes
        with it; the pool stops after its last), else the caller gives it on (``free``)."""
        if slot.pool not in self._retiring:
            return False
        self._gone(slot.pool)
        return True

    def free(self, slot: Slot) -> None:
        heapq.heappush(self._free, (slot.index, slot.pool, slot.number))

    def add(self, pool: InstancePool) -> list[Slot]:
        """A pool for an added instance; its slots (not free yet: the caller gives each on)."""
        p = len(self.pools)
        self.pools.append(pool)
        added = [Slot(len(self.all) + i, p, i) for i in range(self.slot_count)]
        self.all.extend(added)
        return added

    async def remove(self, indices: list[int]) -> None:
        """The pools at ``indices`` take no new sequence; each stops once its slots are free; returns
        once the pools idle now stopped."""
        gone = set(indices)
        self._free = [f for f in self._free if f[1] not in gone]
        heapq.heapify(self._free)
        for p in indices:
            self._retiring[p] = self.slot_count
        for slot in self.all:
            if slot.pool in gone and slot.seq is None:
                self._gone(slot.pool)
        stopping = [t for t in self._stops if not t.done()]
        if stopping:  # the instances idle now finalize before the load answers, as the reference's
            await asyncio.wait(stopping)

    def _gone(self, pool: int) -> None:
        """A slot of a removed instance is free of its sequence: after the last, the pool stops."""
        self._retiring[pool] -= 1
        if self._retiring[pool] > 0:
            return
        del self._retiring[pool]
        self._retired.add(pool)
        task = self._loop.create_task(self._stop_pool(self.pools[pool], 0))
        self._stops.add(task)
        task.add_done_callback(self._stops.discard)

    async def stop(self, timeout_s: float) -> None:
        """Stop every pool not stopped yet (one at a time), and wait for the removed ones' stops."""
        live = [p for i, p in enumerate(self.pools) if i not in self._retired]
        self._retired.update(range(len(self.pools)))
        self._retiring.clear()  # their pools stop here
        await asyncio.gather(*(self._stop_pool(p, timeout_s) for p in live), *self._stops)

    async def _stop_pool(self, pool: InstancePool, timeout_s: float) -> None:
        async with self._unloading:
            await pool.stop(timeout_s)

    def halt(self) -> None:
        """End every pool's workers at once (a load that fails)."""
        for pool in self.pools:
            pool.halt()
