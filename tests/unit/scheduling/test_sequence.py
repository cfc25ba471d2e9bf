"""The sequence batcher with fake instances: slots, order, controls, state, backlog, idle, errors."""

from __future__ import annotations

import asyncio

import pytest
from poolkit import Gate, run, until, wait_event
from seqkit import CONTROLS, STATE, Accumulator, batcher, config, out, req, results, send

from inferd.core.request import SEQUENCE_END, SEQUENCE_START, InferRequest
from inferd.errors import InvalidArgumentError, UnavailableError
from inferd.scheduling.sequence import BACKLOG_EXPIRED, STOPPING

START_ERROR = (
    "inference request for sequence {} to model 'seq' must specify the START flag on the first request of "
    "the sequence"
)


# -- the reference's refusals ----------------------------------------------------------------------


def test_refusals_have_the_reference_texts() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        b = batcher(loop, config(), [Accumulator()])
        with pytest.raises(InvalidArgumentError) as e:
            send(b, loop, req(0, 1, start=True))
        assert e.value.message == (
            "inference request to model 'seq' must specify a non-zero or non-empty correlation ID"
        )
        with pytest.raises(InvalidArgumentError) as e:
            send(b, loop, req("", 1, start=True))
        assert "non-zero or non-empty correlation ID" in e.value.message
        with pytest.raises(InvalidArgumentError) as e:
            send(b, loop, req(8, 1))
        assert e.value.message == START_ERROR.format(8)
        with pytest.raises(InvalidArgumentError) as e:
            send(b, loop, req("abc", 1))
        assert e.value.message == START_ERROR.format("abc")
        big = req(9, 1, start=True)
        big.batch_size = 2
        with pytest.raises(InvalidArgumentError) as e:
            send(b, loop, big)
        assert e.value.message == (
            "inference request to model 'seq' must specify batch-size 1 due to requirements of sequence batcher"
        )
        # the refusals left nothing behind: a proper sequence still runs
        got = await results(send(b, loop, req(5, 1, start=True), req(5, 2, end=True)))
        assert [out(r) for r in got] == [1, 2]
        # after its END the ID is unknown again
        with pytest.raises(InvalidArgumentError) as e:
            send(b, loop, req(5, 3))
        assert e.value.message == START_ERROR.format(5)
        await b.stop(5)

    run(main)


# -- controls, order, state -------------------------------------------------------------------------


def test_controls_follow_the_flags() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst = Accumulator()
        b = batcher(loop, config(), [inst])
        await results(send(b, loop, req(7, 1, start=True), req(7, 2), req(7, 3, end=True)))
        await results(send(b, loop, req(11, 4, start=True, end=True)))
        seen = inst.seen
        assert [(s.value("START"), s.value("END"), s.value("READY"), s.value("CORRID")) for s in seen] == [
            (1, 0.0, True, 7),
            (0, 0.0, True, 7),
            (0, 1.0, True, 7),
            (1, 1.0, True, 11),
        ]
        assert [type(seen[0].value(n)).__name__ for n in ("START", "END", "READY", "CORRID")] == [
            "int32",
            "float32",
            "bool",
            "uint64",
        ]
        assert [s.flags for s in seen] == [SEQUENCE_START, 0, SEQUENCE_END, SEQUENCE_START | SEQUENCE_END]
        await b.stop(5)

    run(main)


def test_a_sequence_runs_in_order_one_request_at_a_time() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst = Accumulator()
        b = batcher(loop, config(mbs=4), [inst])
        reqs = [req(3, i, start=i == 0, end=i == 5, mbs=4) for i in range(6)]
        got = await results(send(b, loop, *reqs))
        assert [out(r) for r in got] == list(range(6))
        assert [[s.value("IN") for s in batch] for batch in inst.batches] == [[i] for i in range(6)]
        await b.stop(5)

    run(main)


def test_implicit_state_feeds_the_next_request_and_stays_hidden() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst = Accumulator()
        b = batcher(loop, config(sequence=CONTROLS + STATE), [inst])
        got = await results(send(b, loop, req(1, 5, start=True), req(1, 6), req(1, 7, end=True)))
        assert [out(r) for r in got] == [5, 11, 18]
        assert all([t.name for t in r.outputs] == ["OUT"] for r in got)
        # a new sequence under the same ID starts from the initial state (zeros)
        got = await results(send(b, loop, req(1, 100, start=True), req(1, 1, end=True)))
        assert [out(r) for r in got] == [100, 101]
        await b.stop(5)

    run(main)


def test_interleaved_sequences_keep_their_own_state() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst = Accumulator()
        b = batcher(loop, config(mbs=2, sequence=CONTROLS + STATE), [inst])
        streams = []
        for i in range(4):
            streams += send(b, loop, req("a", 1, start=i == 0, end=i == 3, mbs=2))
            streams += send(b, loop, req("b", 10, start=i == 0, end=i == 3, mbs=2))
        got = await results(streams)
        assert [out(r) for r in got[0::2]] == [1, 2, 3, 4]
        assert [out(r) for r in got[1::2]] == [10, 20, 30, 40]
        await b.stop(5)

    run(main)


def test_a_start_on_a_live_id_restarts_its_state_in_the_same_slot() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst = Accumulator()
        b = batcher(loop, config(sequence=CONTROLS + STATE), [inst])
        got = await results(send(b, loop, req(4, 5, start=True), req(4, 6), req(4, 1, start=True)))
        assert [out(r) for r in got] == [5, 11, 1]
        await results(send(b, loop, req(4, 1, end=True)))
        await b.stop(5)

    run(main)


# -- direct: slots and fillers --------------------------------------------------------------------------


def test_direct_keeps_each_sequence_at_its_slot_with_fillers() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        gate = Gate()
        inst = Accumulator(gate)
        b = batcher(loop, config(mbs=2), [inst])
        first = send(b, loop, req(1, 1, start=True, mbs=2))  # slot 0
        await wait_event(gate.started)
        second = send(b, loop, req(2, 2, start=True, mbs=2))  # slot 1, waits behind the gate
        gate.release.set()
        await results(first + second)
        # only slot 1 has a request: slot 0 gets a filler (not ready, CORRID 0, zeros, no flags)
        await results(send(b, loop, req(2, 3, mbs=2)))
        batch = inst.batches[-1]
        assert [s.cid for s in batch] == [0, 2]
        assert [(s.value("READY"), s.value("START"), s.value("CORRID"), s.value("IN")) for s in batch] == [
            (False, 0, 0, 0),
            (True, 0, 2, 3),
        ]
        assert batch[0].flags == 0
        await results(send(b, loop, req(1, 4, mbs=2, end=True), req(2, 5, mbs=2, end=True)))
        await b.stop(5)

    run(main)


def test_direct_batches_ready_slots_in_slot_order() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst = Accumulator()
        b = batcher(loop, config(mbs=3), [inst])
        await results(send(b, loop, req(1, 1, start=True, mbs=3), req(2, 2, start=True, mbs=3)))
        gate = Gate()
        inst.hook = gate
        blocker = send(b, loop, req(3, 3, start=True, end=True, mbs=3))  # slot 2
        await wait_event(gate.started)
        both = send(b, loop, req(2, 5, mbs=3, end=True), req(1, 6, mbs=3, end=True))
        gate.release.set()
        await results(blocker + both)
        assert [s.cid for s in inst.batches[-1]] == [1, 2]  # slot 0, slot 1: no filler needed
        await b.stop(5)

    run(main)


def test_oldest_batches_across_sequences_without_fillers() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        gate = Gate()
        inst = Accumulator(gate)
        cfg = config(mbs=4, sequence=CONTROLS + "oldest { max_candidate_sequences: 4 }")
        b = batcher(loop, cfg, [inst])
        streams = send(b, loop, req(1, 1, start=True, mbs=4))
        await wait_event(gate.started)
        streams += send(b, loop, req(2, 2, start=True, mbs=4), req(3, 3, start=True, mbs=4))
        streams += send(b, loop, req(2, 4, mbs=4))  # waits for its sequence's previous request
        gate.release.set()
        await results(streams)
        assert [[s.cid for s in batch] for batch in inst.batches] == [[1], [2, 3], [2]]
        assert b.settings.oldest and not b.settings.fillers
        await b.stop(5)

    run(main)


# -- slots, backlog, idle ----------------------------------------------------------------------------


def test_sequences_take_the_lowest_free_slot_across_instances() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        a, c = Accumulator(), Accumulator()
        b = batcher(loop, config(mbs=2, instances=2), [a, c])
        await results(send(b, loop, *(req(i, i, start=True, mbs=2) for i in (1, 2, 3))))
        # slot 0 of each instance first, then slot 1 of the first
        assert sorted(s.cid for s in a.seen) == [1, 3] and [s.cid for s in c.seen] == [2]
        await b.stop(5)

    run(main)


def test_a_start_waits_in_the_backlog_until_a_slot_frees() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst = Accumulator()
        b = batcher(loop, config(), [inst])  # one slot
        one = send(b, loop, req(1, 1, start=True))
        two = send(b, loop, req(2, 10, start=True), req(2, 11, end=True))
        await results(one)
        assert b.stats()["backlog"] == 1 and [s.cid for s in inst.seen] == [1]
        three = send(b, loop, req(1, 2, end=True))
        got = await results(three + two)
        assert [out(r) for r in got] == [2, 10, 11]
        assert [s.cid for s in inst.seen] == [1, 1, 2, 2]
        await b.stop(5)

    run(main)


def test_a_backlogged_sequence_past_its_timeout_is_rejected() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        b = batcher(loop, config(), [Accumulator()])
        await results(send(b, loop, req(1, 1, start=True)))
        waiting = send(b, loop, req(2, 1, start=True, timeout_us=1000), req(2, 2))
        got = await results(waiting)
        assert all(r.error is not None and r.error.message == BACKLOG_EXPIRED for r in got)
        assert isinstance(got[0].error, UnavailableError)
        assert b.inflight() == 0
        with pytest.raises(InvalidArgumentError):  # forgotten
            send(b, loop, req(2, 3))
        await results(send(b, loop, req(1, 2, end=True)))
        await b.stop(5)

    run(main)


def test_an_idle_sequence_is_released_and_its_slot_reused() -> None:
    now = [0]

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst = Accumulator()
        b = batcher(loop, config(sequence=CONTROLS + STATE), [inst], clock=lambda: now[0])
        await results(send(b, loop, req(1, 5, start=True)))
        now[0] += 4_000_000_000
        backlogged = send(b, loop, req(2, 7, start=True))
        now[0] += 1_000_000_000 - 1  # not idle yet
        b.reap()
        assert b.stats()["backlog"] == 1
        now[0] += 2
        b.reap()
        got = await results(backlogged)
        assert out(got[0]) == 7  # its own state, not sequence 1's
        with pytest.raises(InvalidArgumentError) as e:
            send(b, loop, req(1, 1))
        assert e.value.message == START_ERROR.format(1)
        await results(send(b, loop, req(2, 1, end=True)))
        await b.stop(5)

    run(main)


# -- cancellation and stop ----------------------------------------------------------------------------


def test_a_cancelled_request_ends_its_sequence() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        gate = Gate()
        inst = Accumulator(gate)
        b = batcher(loop, config(), [inst])
        first = send(b, loop, req(1, 1, start=True))
        await wait_event(gate.started)
        rest = send(b, loop, req(1, 2), req(1, 3))
        rest[0].cancel("the client went away")
        gate.release.set()
        got = await results(first + rest)
        assert out(got[0]) == 1
        assert [type(r.error).__name__ for r in got[1:]] == ["RequestCancelledError"] * 2
        assert [s.value("IN") for s in inst.seen] == [1]
        with pytest.raises(InvalidArgumentError):
            send(b, loop, req(1, 4))
        await until(lambda: b.inflight() == 0)
        await b.stop(5)

    run(main)


def test_stop_refuses_new_sequences_and_lets_live_ones_finish() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst = Accumulator()
        b = batcher(loop, config(), [inst])
        await results(send(b, loop, req(1, 1, start=True)))
        queued = send(b, loop, req(1, 2))
        stopping = asyncio.ensure_future(b.stop(5))
        await asyncio.sleep(0)
        with pytest.raises(UnavailableError) as e:
            send(b, loop, req(2, 1, start=True))
        assert e.value.message == STOPPING
        await results(queued)
        await stopping
        assert inst.unloaded

    run(main)


def test_drain_refuses_new_sequences_and_serves_the_live_ones_to_their_end() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst = Accumulator()
        b = batcher(loop, config(), [inst])
        await results(send(b, loop, req(1, 1, start=True)))
        assert b.live_sequences() == 1
        b.drain()  # the server is shutting down
        with pytest.raises(UnavailableError) as e:
            send(b, loop, req(2, 1, start=True))
        assert e.value.message == STOPPING
        got = await results(send(b, loop, req(1, 2)))  # the live sequence's next request, later
        assert [out(r) for r in got] == [2] and b.live_sequences() == 1
        await results(send(b, loop, req(1, 3, end=True)))
        assert b.live_sequences() == 0
        await b.stop(5)

    run(main)


def test_string_ids_and_a_string_corrid_control() -> None:
    corrid = 'control_input [ { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_STRING } ] } ]'

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst = Accumulator()
        b = batcher(loop, config(sequence=corrid + STATE), [inst])
        streams = send(
            b, loop, req("x", 1, start=True), req("y", 2, start=True, end=True), req("x", 3, end=True)
        )
        got = await results(streams)
        assert [out(r) for r in got] == [1, 2, 4]
        assert [s.value("CORRID") for s in inst.seen] == [b"x", b"x", b"y"]  # one slot: y waited
        await b.stop(5)

    run(main)


class SendingAccumulator(Accumulator):
    """A decoupled instance: answers through the request streams after execute returned None."""

    def execute(self, requests: list[InferRequest]) -> None:
        responses = super().execute(requests)
        for r, resp in zip(requests, responses, strict=True):
            assert r.stream is not None
            r.stream.send(resp)
            r.stream.send(None, True)


def test_a_decoupled_model_gets_no_fillers_and_its_states_come_from_its_sent_responses() -> None:
    async def main(loop: asyncio.AbstractEventLoop) -> None:
        inst = SendingAccumulator()
        b = batcher(loop, config(mbs=2, sequence=CONTROLS + STATE, decoupled=True), [inst])
        assert not b.settings.fillers
        got = await results(
            send(b, loop, req(1, 5, start=True, mbs=2), req(1, 6, mbs=2), req(1, 7, end=True, mbs=2))
        )
        assert [out(r) for r in got] == [5, 11, 18]
        assert all([t.name for t in r.outputs] == ["OUT"] for r in got)
        await until(lambda: b.inflight() == 0)
        await b.stop(5)

    run(main)


def test_queue_time_counts_from_the_batcher() -> None:
    now = [1_000]

    async def main(loop: asyncio.AbstractEventLoop) -> None:
        b = batcher(loop, config(), [Accumulator()], clock=lambda: now[0])
        first = req(1, 1, start=True)
        streams = send(b, loop, first)
        assert first.t_queue_ns == 1_000
        second = req(1, 2, end=True)
        streams += send(b, loop, second)
        now[0] = 5_000  # the second waits for the first to be answered
        await results(streams)
        assert second.t_queue_ns == 1_000  # not when the pool got it
        await b.stop(5)

    run(main)
