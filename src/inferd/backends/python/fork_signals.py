"""What a process forked from inferd's (a model's ``os.fork``, ``multiprocessing`` with the fork start
method) gets of its parent's SIGTERM and SIGINT: their default actions, as a new program has them.

Inherited, the server's would be wrong for it. The server catches both, and the C-level handler
writes the signal's number into the wakeup descriptor (``signal.set_wakeup_fd``) that the child
shares with the server: a pool's worker ended with SIGTERM (``Pool.terminate``) would stop the
server, and live on itself, holding the pool's exit and the model's execute forever
(qa/L0_backend_python bls). A worker process ignores both (the server decides when it stops), so its
pool's workers would ignore the SIGTERM that ends them, with the same hang.

Resetting them in the child (``os.register_at_fork``'s ``after_in_child``) is not enough alone: the
child runs its at-fork hooks only once it is scheduled, and a signal sent in between (a pool that
ends before its last worker ever ran, on a busy machine) meets the parent's handler. So the forking
thread blocks both before the fork; the child, which inherits that mask, resets the handlers and
then unblocks them (a signal that came meanwhile is delivered now, with the default action); the
parent restores its thread's mask.
"""

from __future__ import annotations

import os
import signal
import threading

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_saved = threading.local()  # the forking thread's mask while its fork is under way
_registered = False


def _before() -> None:
    _saved.mask = signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)


def _restore() -> None:
    mask = getattr(_saved, "mask", None)
    if mask is not None:
        _saved.mask = None
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _after_in_child() -> None:
    signal.set_wakeup_fd(-1)
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    _restore()


def default_signals_in_forks() -> None:
    """From now on, processes forked from this one start with SIGTERM and SIGINT at their default
    actions, also when one is sent to them before they first run. Once per process."""
    global _registered
    if _registered:
        return
    _registered = True
    os.register_at_fork(before=_before, after_in_parent=_restore, after_in_child=_after_in_child)
