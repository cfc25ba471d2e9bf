"""SIGTERM in the processes a model forks (backends/python/fork_signals.py): a pool's worker ended with
SIGTERM before it first ran (a busy machine) dies of it, and neither stops the server nor outlives
the pool; in a worker process (which ignores SIGTERM) too.

Each case runs in a fresh interpreter: at-fork hooks and signal handlers are process-wide. The
window is made deterministic by an at-fork hook registered first, which sends the child SIGTERM as
its first act, before the hooks under test run."""

from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = """
import asyncio
import os
import signal
import sys

from inferd.backends.python.fork_signals import default_signals_in_forks

server = sys.argv[1] == "server"


def early() -> None:  # the child's first act, before the reset: a SIGTERM comes (Pool.terminate)
    os.kill(os.getpid(), signal.SIGTERM)


os.register_at_fork(after_in_child=early)


def fork_and_wait() -> tuple[int, list[int]]:
    pid = os.fork()
    if pid == 0:  # the signal did not end it: it would live on (as a pool's worker, forever)
        os._exit(0)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])  # the forking thread's mask, restored
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), sorted(mask)


async def main() -> None:
    loop = asyncio.get_running_loop()
    stopped, marker = asyncio.Event(), asyncio.Event()
    if server:  # the server catches SIGTERM (the wakeup descriptor carries it)
        loop.add_signal_handler(signal.SIGTERM, stopped.set)
    else:  # a worker process ignores it
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    loop.add_signal_handler(signal.SIGUSR1, marker.set)
    default_signals_in_forks()
    code, mask = await loop.run_in_executor(None, fork_and_wait)  # from a thread, as an execute forks
    # the wakeup descriptor is read in order: by the time SIGUSR1 is handled, a SIGTERM the child
    # wrote there would have been handled too
    os.kill(os.getpid(), signal.SIGUSR1)
    await marker.wait()
    print(code, stopped.is_set(), mask)


asyncio.run(main())
"""


@pytest.mark.parametrize("parent", ["server", "worker"])
def test_a_sigterm_before_the_child_first_runs_ends_the_child_only(parent: str) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, parent], capture_output=True, text=True, timeout=60, check=False
    )
    assert out.returncode == 0, out.stderr
    # the child died of SIGTERM; the parent's handler never saw it; the parent's mask is as it was
    assert out.stdout.split() == ["-15", "False", "[]"], out.stdout + out.stderr
