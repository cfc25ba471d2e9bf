"""Model instances of any backend in worker processes: a crash, a leak or a hang there ends only
the worker, never the server (``instance.py``: the server's side; ``worker.py``: the worker's main;
``ipc.py``: the channel; ``relay.py``: BLS from a worker; ``memory.py``: limits on a worker's memory).
"""

#: set in the LoadContext a worker process gives its backend: there the instance is a thread of the
#: worker, whatever the config's ``execution_mode`` says
IN_WORKER = "inferd-in-worker"

#: whether this process is a worker (``worker.main`` marks it): what runs here is contained already,
#: so a backend that would hand work to a worker (a C backend's auto-complete) does it here instead
_worker_process = [False]


def mark_worker_process() -> None:
    _worker_process[0] = True


def in_worker_process() -> bool:
    return _worker_process[0]
