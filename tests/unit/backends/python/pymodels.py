"""Helpers of the Python backend's unit tests: write a model, load an instance, execute, drain."""

from __future__ import annotations

import asyncio
import textwrap
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.base import InstanceSpec, LoadContext, ServerLinks
from inferd.backends.python import pb_utils
from inferd.backends.python.backend import PythonBackend, PythonInstance
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.tensor import Tensor
from inferd.repository import load_model_config, normalize_config

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
model_transaction_policy {{ decoupled: {decoupled} }}
input [ {{ name: "IN" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "MSG" data_type: TYPE_STRING dims: [ 1 ] }}
]
"""


def write_model(
    root: Path,
    name: str,
    source: str,
    *,
    decoupled: bool = False,
    max_batch_size: int = 0,
    config: str | None = None,
) -> Path:
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    text = config if config is not None else CONFIG
    (model_dir / "config.pbtxt").write_text(
        text.format(name=name, decoupled=str(decoupled).lower(), max_batch_size=max_batch_size)
    )
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(source))
    return model_dir


def instance(model_dir: Path, links: ServerLinks | None = None) -> PythonInstance:
    cfg, _ = load_model_config(model_dir)
    normalize_config(cfg, model_dir.name, model_dir=model_dir)
    links = links or ServerLinks()
    ctx = LoadContext(model_dir.name, 1, model_dir, model_dir / "1", cfg, links.infer_blocking, links)
    inst = PythonBackend().load(ctx).create_instance(InstanceSpec(f"{model_dir.name}_0", "CPU", 0))
    assert isinstance(inst, PythonInstance)
    return inst


def request(n: int = 1, rid: str = "", model: str = "m", **params: Any) -> InferRequest:
    return InferRequest(
        model_name=model,
        inputs={"IN": Tensor.from_array("IN", np.array([n], np.int32))},
        id=rid,
        parameters=params,
    )


_worker = ThreadPoolExecutor(2, thread_name_prefix="test-pymodels")


async def execute(
    inst: PythonInstance, *requests: InferRequest, on_loop: bool = False
) -> list[InferResponse] | None:
    """Execute in a worker thread (or on the loop's thread, as inline mode does) with streams set."""
    loop = asyncio.get_running_loop()
    for r in requests:
        if r.stream is None:
            r.stream = ResponseStream(loop)
    if on_loop:
        try:
            return inst.execute(list(requests))
        finally:
            pb_utils._set_thread_hooks(pb_utils._default_hooks)  # this thread runs other tests too
    return await loop.run_in_executor(_worker, inst.execute, list(requests))


async def drain(stream: ResponseStream | None, timeout: float = 5) -> list[tuple[InferResponse | None, bool]]:
    """Everything the stream gets until its final flag."""
    assert stream is not None
    items = []

    async def go() -> None:
        async for item in stream:
            items.append(item)

    await asyncio.wait_for(go(), timeout)
    return items


def outs(items: list[tuple[InferResponse | None, bool]]) -> list[Any]:
    """OUT values, error messages, None for a flag-only send; a trailing "F" marks the final flag."""
    out: list[Any] = []
    for r, final in items:
        if r is None:
            out.append(None)
        elif r.error is not None:
            out.append(f"error: {r.error.message}")
        else:
            tensors = {t.name: t.array.tolist() for t in r.outputs}
            out.append(tensors.get("OUT", tensors.get("MSG")))
        if final:
            out.append("F")
    return out


WAIT_S = 30.0


def until(cond: Callable[[], object], what: str) -> None:
    """Returns as soon as ``cond()`` holds (other threads run meanwhile); fails naming ``what`` after WAIT_S."""
    deadline = time.monotonic() + WAIT_S
    while not cond():
        assert time.monotonic() < deadline, f"no {what} after {WAIT_S:.0f} s"
        time.sleep(0)


def answers(inst: PythonInstance, *requests: InferRequest, on_loop: bool = False) -> list[list[Any]]:
    """Execute ``requests`` and what each stream got (returned responses delivered as the pool does)."""

    async def main() -> list[list[Any]]:
        result = await execute(inst, *requests, on_loop=on_loop)
        if result is not None:
            for r, resp in zip(requests, result, strict=True):
                assert r.stream is not None
                r.stream.deliver(resp, True)
        return [outs(await drain(r.stream)) for r in requests]

    return asyncio.run(main())
