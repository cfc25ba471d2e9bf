"""Ports picked ahead, for what must be told its port before it starts: the store emulators, and the
few servers whose port number is itself under test (the Helm chart's, the recorded cloud scenarios',
the reference start-up lines for a fixed port). Every other inferd server binds port 0 and says in
its start-up lines which port it got (tests/e2e/conftest.py reads them): no race at all.

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
import re
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


#: a start-up line naming where a front end listens (any log format: the message is the same); the
#: port is the one bound, also for port 0 (the reference would write ":0" there)
_LISTENING = re.compile(
    r"Started (GRPCInferenceService|Metrics Service|HTTPService|Sagemaker HTTPService|"
    r"Vertex AI HTTPService) at (\S+):(\d+)"
)


def listening_ports(text: str) -> dict[str, int]:
    """The ports the start-up lines in ``text`` name, by service ("HTTPService", "Metrics Service",
    "GRPCInferenceService", ...); the last line of a service wins (a server started again)."""
    return {m[1]: int(m[3]) for m in _LISTENING.finditer(text)}
