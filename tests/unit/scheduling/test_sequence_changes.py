"""The sequence batcher's iterative sequences (requests without an ID, rescheduled by their model)
and its instances changing while it serves (an instance_group update)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from poolkit import Gate, run, until, wait_event
from seqkit import CONTROLS, Accumulator, batcher, config, out, req, results, send

from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.stats import ModelStats
from inferd.scheduling.sequence import NOT_STARTED, SequenceBatcher

ITERATIVE = "iterative_sequence: true\n" + CONTROLS


class Again(Accumulator):
    """Reschedules each request until it was executed IN times (one request per execute)."""

    def __init__(self, hook: Gate | None = None) -> None:
        super().__init__(hook)
        self.rescheduler: Callable[[InferRequest], None] | None = None
        self.times: dict[int, int] = {}

    def execute(self, requests: list[InferRequest]) -> list[InferResponse] | None:
        answers = super().execute(requests)
        (r,) = requests
        n = self.times[id(r)] = self.times.get(id(r), 0) + 1
        if n < int(r.inputs["IN"].array.reshape(-1)[0]):
            assert self.rescheduler is not None
            self.rescheduler(r)
            return None
        assert r.stream is not None
        r.stream.send(answers[0], True)
        return None


def test_a_request_without_an_id_is_a_sequence_of_its_own_until_its_model_releases_it() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst, stats = Again(), ModelStats()
        b = SequenceBatcher("seq", "1", config(sequence=ITERATIVE), [("seq_0", inst)], stats, loop)
        assert inst.rescheduler == b.reschedule
        got = await results(send(b, loop, req(0, 3)))
        assert out(got[0]) == 3
        assert [(s.cid, s.flags, s.value("START"), s.value("CORRID")) for s in inst.seen] == [
            (1, 1, 1, 1),
            (1, 0, 0, 1),
            (1, 0, 0, 1),
        ]
        await results(send(b, loop, req("", 1)))  # the next ID; ended at its final response
        assert inst.seen[-1].cid == 2 and b.live_sequences() == 0
        # the reference's END requests, one per sequence (its executes are successes); the model
        # answers from inside its execute, so the execute's statistics land once the execute returns
        await until(lambda: b.inflight() == 0 and stats.success.count + stats.fail.count >= 6)
        assert (stats.fail_reasons["CANCELED"], stats.fail.count, stats.success.count) == (2, 2, 4)
        await b.stop(5)

    run(main)


def test_a_rescheduled_request_whose_sequence_ended_meanwhile_is_refused() -> None:
    now = [0]

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        gate = Gate()
        inst = Again(gate)
        b = batcher(loop, config(sequence=ITERATIVE), [inst], clock=lambda: now[0])
        stream = send(b, loop, req(0, 2))
        await wait_event(gate.started)
        now[0] += 6_000_000_000  # past max_sequence_idle_microseconds (5 s): released while it runs
        b.reap()
        gate.release.set()
        (got,) = await results(stream)
        assert got.error is not None
        assert got.error.message == f"inference request for sequence 1 to model 'seq' {NOT_STARTED}"
        await until(lambda: b.inflight() == 0)
        await b.stop(5)

    run(main)


def test_a_removed_instance_keeps_its_sequences_and_unloads_after_them() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        kept, removed, added = Accumulator(), Accumulator(), Accumulator()
        b = batcher(loop, config(), [kept, removed])
        await results(send(b, loop, req(1, 1, start=True), req(2, 2, start=True)))
        assert [s.cid for s in kept.seen] == [1] and [s.cid for s in removed.seen] == [2]
        assert b.add_instances([("seq_2", added)]) == [2]
        await asyncio.wait_for(b.remove_instances([1], 5), 5)  # it does not wait for sequence 2
        assert not removed.unloaded
        await results(send(b, loop, req(2, 3), req(3, 4, start=True, end=True)))
        assert [s.cid for s in removed.seen] == [2, 2]  # sequence 2 goes on where it was
        assert [s.cid for s in added.seen] == [3]  # a new sequence: never on the removed instance
        await results(send(b, loop, req(2, 5, end=True)))
        await until(lambda: removed.unloaded)
        await results(send(b, loop, req(4, 6, start=True, end=True), req(1, 7, end=True)))
        assert [s.cid for s in removed.seen] == [2, 2, 2]
        await b.stop(5)
        assert kept.unloaded and added.unloaded

    run(main)


#: how long the first instance to unload waits for another to begin beside it (only a batcher that
#: unloads in parallel ever ends the wait early)
OVERLAP_WAIT_S = 1.0


class Unloads:
    """Counts the unloads running at once (``peak``); the first one waits for another to begin."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.active = self.peak = 0
        self.first = True
        self.other_began = threading.Event()

    def run(self) -> None:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
            first, self.first = self.first, False
        if first:
            self.other_began.wait(OVERLAP_WAIT_S)
        else:
            self.other_began.set()
        with self.lock:
            self.active -= 1


class Finalizing(Accumulator):
    """An instance whose unload (a Python model's ``finalize``) takes part in ``unloads``."""

    def __init__(self, unloads: Unloads) -> None:
        super().__init__()
        self.unloads = unloads

    def unload(self) -> None:
        self.unloads.run()
        super().unload()


def test_the_instances_unload_one_at_a_time_at_the_stop() -> None:
    """As an InstancePool's (and the reference's stubs): a finalize that counts in a file under
    lockf, as Triton's qa model_init_del does, lost counts when two ran in threads side by side."""

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        unloads = Unloads()
        instances = [Finalizing(unloads) for _ in range(3)]
        b = batcher(loop, config(), instances)
        await results(send(b, loop, req(1, 1, start=True, end=True)))
        await b.stop(5)
        assert all(i.unloaded for i in instances)
        assert unloads.peak == 1

    run(main)


def test_instances_removed_together_unload_one_at_a_time() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        unloads = Unloads()
        instances = [Finalizing(unloads) for _ in range(3)]
        b = batcher(loop, config(), instances)
        await asyncio.wait_for(b.remove_instances([0, 1], 5), 5)  # no sequences: they unload now
        assert instances[0].unloaded and instances[1].unloaded and not instances[2].unloaded
        assert unloads.peak == 1
        await results(send(b, loop, req(1, 1, start=True, end=True)))
        assert [s.cid for s in instances[2].seen] == [1]
        await b.stop(5)

    run(main)
