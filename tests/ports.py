"""Ports for the servers and emulators the tests start: the one place that picks them.

A port the kernel hands out for ``bind(0)`` is free only until the socket closes; the server the
test then starts binds it seconds later. Two xdist workers picking that way can be given the same
port in between, and because ``--workers`` servers and gRPC share their ports with SO_REUSEPORT,
the second bind does not even fail: one server's HTTP requests then land on another's gRPC port
("bad preface"). So each xdist worker picks from its own slice of a range below the kernel's
ephemeral ports (``/proc/sys/net/ipv4/ip_local_port_range``, 32768-60999 by default; Ray's worker
ports end at 19999), starting at a random place in it (two test runs side by side rarely meet), and
skips a port it cannot bind now. Two workers of one run never pick the same port.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from collections.abc import Iterator

_LOW, _HIGH = 20_000, 32_000
_SLICES = 8


def _worker_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")  # "gw0", "gw1", ...; unset without xdist
    index = int(worker[2:]) if worker[:2] == "gw" and worker[2:].isdigit() else 0
    width = (_HIGH - _LOW) // _SLICES
    start = _LOW + (index % _SLICES) * width
    return range(start, start + width)


def _cycle(ports: range) -> Iterator[int]:
    first = random.randrange(len(ports))
    return itertools.cycle([*ports[first:], *ports[:first]])


_SLICE = _worker_slice()
_NEXT = _cycle(_SLICE)


def free_port() -> int:
    """A port of this worker's slice that nothing is bound to now (any address)."""
    for _ in range(len(_SLICE)):
        port = next(_NEXT)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {_SLICE.start}-{_SLICE.stop - 1}")
