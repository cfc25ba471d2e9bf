"""The stateful example (examples/build_models.py ``signal_smoother``) behind ``inferd serve``: a
signal streamed in chunks answers what the whole signal sent at once answers, over HTTP and over a
gRPC stream, several signals at a time, and both match the same computation in numpy."""

from __future__ import annotations

import itertools
import queue
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import REPO_ROOT, InferdProcess

from repo_paths import load_script

pytestmark = pytest.mark.timeout(120)
MODEL = "signal_smoother"


def _build_models() -> ModuleType:
    return load_script(REPO_ROOT / "examples" / "build_models.py", "inferd_example_build")


build_models = _build_models()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    repo = tmp_path_factory.mktemp("smoother") / "models"
    assert build_models.build(repo, {MODEL}) == [MODEL]
    proc = InferdProcess(repo, Path(str(repo.parent)) / "inferd.log").start()
    try:
        yield proc
    finally:
        proc.stop()


def _signal(seed: int, n: int = 200) -> np.ndarray[Any, Any]:
    t = np.arange(n, dtype=np.float32)
    noise = np.random.default_rng(seed).normal(0, 0.5, n).astype(np.float32)
    return (np.sin(t / 9) * 3 + seed + noise).astype(np.float32)


def _chunks(signal: np.ndarray[Any, Any], sizes: list[int]) -> list[np.ndarray[Any, Any]]:
    edges = np.cumsum([0, *sizes])
    assert edges[-1] == len(signal)
    return [signal[a:b] for a, b in itertools.pairwise(edges)]


def _send(client: Any, module: Any, cid: int, chunks: list[np.ndarray[Any, Any]]) -> tuple[Any, Any]:
    smoothed, means = [], []
    for i, chunk in enumerate(chunks):
        t = module.InferInput("CHUNK", [len(chunk)], "FP32")
        t.set_data_from_numpy(chunk)
        r = client.infer(
            MODEL, [t], sequence_id=cid, sequence_start=i == 0, sequence_end=i == len(chunks) - 1
        )
        smoothed.append(r.as_numpy("SMOOTHED"))
        means.append(r.as_numpy("RUNNING_MEAN"))
    return np.concatenate(smoothed), np.concatenate(means)


def test_chunks_answer_what_the_whole_signal_answers(server: InferdProcess) -> None:
    signal = _signal(1)
    http = httpclient.InferenceServerClient(server.url)
    try:
        whole = _send(http, httpclient, 1, [signal])
        chunked = _send(http, httpclient, 2, _chunks(signal, [1, 17, 50, 2, 100, 30]))
    finally:
        http.close()
    np.testing.assert_allclose(chunked[0], whole[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(chunked[1], whole[1], rtol=1e-6, atol=1e-6)
    smoothed, mean = build_models.family("onnx_models").signal_smoother_reference(signal)
    np.testing.assert_allclose(whole[0], smoothed, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(whole[1], mean, rtol=1e-5, atol=1e-5)
    assert whole[0][0] == signal[0]  # START: the average begins at the first sample


def test_signals_interleaved_on_a_grpc_stream(server: InferdProcess) -> None:
    """Four signals' chunks sent round-robin on one stream without waiting: each keeps its own state."""
    signals = {10 + k: _signal(k) for k in range(4)}
    sizes = [40, 40, 40, 40, 40]
    got: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    client.start_stream(callback=lambda result, error: got.put((result, error)))
    try:
        for i in range(len(sizes)):
            for cid, signal in signals.items():
                chunk = _chunks(signal, sizes)[i]
                t = grpcclient.InferInput("CHUNK", [len(chunk)], "FP32")
                t.set_data_from_numpy(chunk)
                client.async_stream_infer(
                    MODEL,
                    [t],
                    request_id=f"{cid}:{i}",
                    sequence_id=cid,
                    sequence_start=i == 0,
                    sequence_end=i == len(sizes) - 1,
                )
        parts: dict[str, Any] = {}
        for _ in range(len(sizes) * len(signals)):
            result, error = got.get(timeout=60)
            assert error is None, error
            parts[result.get_response().id] = result.as_numpy("SMOOTHED")
    finally:
        client.stop_stream()
        client.close()
    for cid, signal in signals.items():
        streamed = np.concatenate([parts[f"{cid}:{i}"] for i in range(len(sizes))])
        np.testing.assert_allclose(
            streamed,
            build_models.family("onnx_models").signal_smoother_reference(signal)[0],
            rtol=1e-5,
            atol=1e-5,
        )
