"""Model warmup (``model_warmup`` in config.pbtxt): samples run on every instance before READY.

As the reference: a sample of ``batch_size`` B is B requests of batch 1 handed to the instance's
execute as one batch, ``count`` times (0: once); its inputs are zeros (``zero_data``), random bytes
(``random_data``; zeros for BYTES, as the reference) or the raw contents of
``<model>/warmup/<input_data_file>`` (BYTES: length-prefixed elements as on the wire). A sample of
batch size 0 is skipped. An error answer fails the load: "failed to run warmup sample '<name>':
<error>; " (INVALID_ARG). The requests go to the instances straight, not through the scheduler, so
the model's statistics do not count them.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from inferd.backends.base import BackendInstance
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.tensor import Tensor, deserialize_bytes
from inferd.core.types import BY_CONFIG_VALUE, BYTES
from inferd.errors import InferdError, InvalidArgumentError
from inferd.scheduling.rate_limiter import Gate, held

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig, ModelWarmup

WARMUP_FOLDER = "warmup"
#: how long a decoupled model's warmup responses are waited for
DECOUPLED_WAIT_S = 600.0


def _input(
    name: str, spec: ModelWarmup.Input, batching: bool, model_dir: Path, rng: np.random.Generator
) -> Tensor:
    datatype = BY_CONFIG_VALUE[spec.data_type]
    dims = tuple(int(d) for d in spec.dims)
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(
            f"warmup setting expects all variable-size dimensions are specified for input '{name}'"
        )
    shape = (1, *dims) if batching else dims
    count = int(np.prod(dims, dtype=np.int64))
    which = spec.WhichOneof("input_data_type")
    if which is None:
        raise InvalidArgumentError(f"warmup setting expects input '{name}' to have input_data_type set")
    if which == "input_data_file":
        data = (model_dir / WARMUP_FOLDER / spec.input_data_file).read_bytes()
        if datatype is BYTES:
            array = deserialize_bytes(data, count)
        else:
            need = count * datatype.itemsize
            if len(data) < need:
                raise InvalidArgumentError(
                    f"warmup setting expects {need} bytes, but the data provided from "
                    f"{spec.input_data_file}only has {len(data)} bytes"
                )
            array = np.frombuffer(data[:need], dtype=datatype.numpy)
    elif datatype is BYTES:  # zero_data, and random_data as the reference: empty strings
        array = np.array([b""] * count, dtype=np.object_)
    elif which == "random_data":
        array = np.frombuffer(rng.bytes(count * datatype.itemsize), dtype=datatype.numpy)
    else:
        array = np.zeros(count, dtype=datatype.numpy)
    return Tensor.from_array(name, array.reshape(shape), datatype)


def _run(
    instance: BackendInstance, requests: list[InferRequest], loop: asyncio.AbstractEventLoop
) -> list[str]:
    """One execute of ``requests``; the error messages of its answers."""
    errors: list[str] = []
    left = len(requests)
    done = threading.Event()
    lock = threading.Lock()

    def answered(response: InferResponse | None, final: bool) -> None:
        nonlocal left
        with lock:
            if response is not None and response.error is not None:
                errors.append(response.error.message)
            if final:
                left -= 1
                if not left:
                    done.set()

    for r in requests:
        r.stream = ResponseStream(loop)
        r.stream.set_callback(answered)
    try:
        responses = instance.execute(requests)
    except InferdError as e:
        return [e.message]
    if responses is None:  # a decoupled model answers through the streams
        if not done.wait(DECOUPLED_WAIT_S):
            errors.append(f"no final response within {DECOUPLED_WAIT_S:g} s")
        return errors
    return [r.error.message for r in responses if r.error is not None]


def warm_up(
    cfg: ModelConfig,
    model_dir: Path,
    instances: Sequence[tuple[str, BackendInstance]],
    loop: asyncio.AbstractEventLoop,
    gate: Gate | None = None,
) -> None:
    """Run the config's warmup samples on each instance (holding its rate-limiter resources, with
    ``gate``); raises InvalidArgumentError on a failure."""
    if not cfg.model_warmup:
        return
    for i, (_name, instance) in enumerate(instances):
        with held(gate, i):
            _warm_instance(cfg, model_dir, instance, loop)


def _warm_instance(
    cfg: ModelConfig, model_dir: Path, instance: BackendInstance, loop: asyncio.AbstractEventLoop
) -> None:
    """Every sample of the config on one instance."""
    batching = cfg.max_batch_size > 0
    rng = np.random.default_rng()
    for sample in cfg.model_warmup:
        if sample.batch_size == 0:
            continue
        for _ in range(max(1, sample.count)):
            requests = [
                InferRequest(
                    model_name=cfg.name,
                    inputs={n: _input(n, s, batching, model_dir, rng) for n, s in sample.inputs.items()},
                    id="",
                )
                for _ in range(sample.batch_size)
            ]
            errors = _run(instance, requests, loop)
            if errors:
                raise InvalidArgumentError(
                    f"failed to run warmup sample '{sample.name}': " + "".join(f"{e}; " for e in errors)
                )
