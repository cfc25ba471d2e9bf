"""Dynamic batching with ``preferred_batch_size`` cuts batches as Triton's dynamic batcher does (issue
45: inferd filled every batch up to max_batch_size; the preferred sizes only set how long it waited).
The workloads of tests/fixtures/batching_workload.py, recorded on Triton 2.51
(tests/fixtures/reference_observed_batching.json), replayed here: 23 requests queued behind a held
one, then let go. The batch-size histogram must match the reference's within one execution per size.

Where the reference's batches depend on when requests arrived (it grows a batch while it waits for
an instance: with a queue delay, pref_d100's first batch took 13, the rest 10), inferd cuts the queue
when an instance is free, by the same rules: README's deliberate differences."""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import InferdProcess

from repo_paths import FIXTURES, load_script

workload = load_script(FIXTURES / "batching_workload.py", "batching_workload")

RECORDED = json.loads((FIXTURES / "reference_observed_batching.json").read_text())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[InferdProcess, Path]]:
    folder = tmp_path_factory.mktemp("batching")
    proc = InferdProcess(
        FIXTURES / "batching_models", folder / "server.log", env={"BATCH_LOG": str(folder)}
    ).start()
    try:
        yield proc, folder
    finally:
        proc.stop()


def _within_one(got: list[int], want: list[int]) -> bool:
    g, w = collections.Counter(got), collections.Counter(want)
    return all(abs(g[size] - w[size]) <= 1 for size in set(g) | set(w))


@pytest.mark.parametrize("pattern", workload.PATTERNS)
def test_without_a_queue_delay_batches_are_cut_at_the_preferred_sizes(
    server: tuple[InferdProcess, Path], pattern: str
) -> None:
    proc, folder = server
    got = workload.run(proc.url, "pref_d0", folder, pattern)
    want = RECORDED["gated"]["pref_d0"][pattern]
    assert sum(got) == sum(want) == workload.QUEUED
    assert _within_one(got, want), (got, want)
    # the largest preferred size the queue fills goes first, what is left as the preferred sizes allow
    assert got == [8, 8, 4, 3]


def test_once_the_queue_delay_passed_everything_up_to_max_batch_size_goes(
    server: tuple[InferdProcess, Path],
) -> None:
    proc, folder = server
    got = workload.run(proc.url, "pref_d100", folder, "together")
    assert _within_one(got, RECORDED["gated"]["pref_d100"]["together"])
    assert got == [16, 7]  # held past the 100 ms delay: max_batch_size, then the rest
