"""The recursion limit in the server's process: a Python model in a thread cannot raise it past
``CAP``.

A thread instance runs on a thread of the server (or, inline, on the event loop's), with that
thread's stack and the one interpreter's recursion limit. A model that raises the limit
(``sys.setrecursionlimit(10**7)``) and then recurses deeply takes the server with it, two ways:

- recursion through C (``sorted(key=...)``, ``map``, ``__getattr__``, properties) uses the thread's
  C stack: with Linux's default 8 MiB stack, ``sorted`` with a recursive key segfaulted at 1,800
  levels, ``map`` and ``__getattr__`` between 10,000 and 20,000: the server's process ends;
- pure Python recursion costs no C stack but memory and time: 10**6 levels held 271 MiB and ended
  with a RecursionError whose unwinding held the interpreter lock for 1.6 s, 10**7 levels 3.7 GB
  and longer than another model's 10 s client timeout.

So in the server's process ``sys.setrecursionlimit`` keeps the limit at ``CAP``, Python's own
default, which holds on that stack with room (an ask above it is logged once per caller, naming the
model when a model asked). A model that needs deeper recursion runs in worker processes, where its
own limit holds (``execution_mode: process``; ``auto`` moves a model that calls
``setrecursionlimit`` there, containment.py). Nothing is added to a request's path: the guard is
the function a model calls.
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Callable

log = logging.getLogger("inferd.python")

#: the most the server's process allows: Python's default limit
CAP = 1000
_lock = threading.Lock()
_original: Callable[[int], None] | None = None
#: the callers already warned about (module names)
_warned: set[str] = set()


def install() -> None:
    """Cap the recursion limit of this process at ``CAP`` from now on (idempotent)."""
    global _original
    with _lock:
        if _original is not None:
            return
        _original = sys.setrecursionlimit
        if sys.getrecursionlimit() > CAP:  # something imported earlier raised it
            _original(CAP)
        sys.setrecursionlimit = _capped


def uninstall() -> None:
    """``sys.setrecursionlimit`` as it was (tests)."""
    global _original
    with _lock:
        if _original is not None:
            sys.setrecursionlimit = _original
            _original = None
            _warned.clear()


def _capped(limit: int) -> None:
    """``sys.setrecursionlimit`` in the server's process: at most ``CAP``."""
    original = _original
    assert original is not None
    if not isinstance(limit, int) or limit <= CAP:
        original(limit)  # its own errors for a bad value, as Python's
        return
    caller = sys._getframe(1).f_globals.get("__name__", "?")
    with _lock:
        first = caller not in _warned
        _warned.add(caller)
    if first:
        if caller.startswith("_inferd_model_"):  # model.py as loader.py names it: <name>_<version>
            who = f"model '{caller.removeprefix('_inferd_model_').rsplit('_', 1)[0]}'"
        elif caller.startswith("_inferd_autocomplete_"):
            who = f"model '{caller.removeprefix('_inferd_autocomplete_')}'"
        else:
            who = f"module '{caller}'"
        log.warning(
            "%s asked for a recursion limit of %d: in the server's process it stays at %d (a thread "
            "instance shares the server's stack; execution_mode process lets a model have its own)",
            who,
            limit,
            CAP,
        )
    original(CAP)
