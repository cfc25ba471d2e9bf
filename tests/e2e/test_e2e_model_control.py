"""Model control behind a real ``inferd serve``, with tritonclient over HTTP and gRPC: explicit mode
(the repository API, config and file overrides, ensembles and their dependents, reloads under load,
unload after draining) and poll mode (a model added, changed and removed)."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess
from tritonclient.utils import InferenceServerException

from repo_paths import REFERENCE_MODELS
from waiting import wait_for_file, wait_until

# sleeps MS milliseconds, with a file "executing" in its folder meanwhile
SLEEP_MODEL = """
import os
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.mark = os.path.join(args["model_repository"], "executing")

    def execute(self, requests):
        out = []
        for request in requests:
            ms = pb_utils.get_input_tensor_by_name(request, "MS").as_numpy()
            open(self.mark, "w").close()
            time.sleep(float(ms[0]) / 1000)
            os.remove(self.mark)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", ms)]))
        return out
"""
SLEEP_CONFIG = """
name: "sleeper"
backend: "python"
input [ { name: "MS" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""
BROKEN_MODEL = 'raise RuntimeError("broken on purpose")\n'
ADD_SUB_CONFIG = (
    '{"backend":"python","max_batch_size":8,'
    '"input":[{"name":"INPUT0","data_type":"TYPE_FP32","dims":[16]},'
    '{"name":"INPUT1","data_type":"TYPE_FP32","dims":[16]}],'
    '"output":[{"name":"OUTPUT0","data_type":"TYPE_FP32","dims":[16]},'
    '{"name":"OUTPUT1","data_type":"TYPE_FP32","dims":[16]}]}'
)


def _repository(root: Path) -> Path:
    repo = root / "models"
    for name in ("add_sub", "identity_fp32", "ensemble_add_sub", "mul_fp32"):
        shutil.copytree(REFERENCE_MODELS / name, repo / name)
    (repo / "sleeper" / "1").mkdir(parents=True)
    (repo / "sleeper" / "config.pbtxt").write_text(SLEEP_CONFIG)
    (repo / "sleeper" / "1" / "model.py").write_text(SLEEP_MODEL)
    (repo / "broken" / "1").mkdir(parents=True)
    (repo / "broken" / "config.pbtxt").write_text(SLEEP_CONFIG.replace("sleeper", "broken"))
    (repo / "broken" / "1" / "model.py").write_text(BROKEN_MODEL)
    return repo


@pytest.fixture(scope="module")
def explicit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    root = tmp_path_factory.mktemp("explicit")
    proc = InferdProcess(
        _repository(root),
        root / "inferd.log",
        ("--model-control-mode=explicit", "--load-model=identity_fp32"),
    ).start()
    try:
        yield proc
    finally:
        proc.stop()


def _add_sub_inputs(mod: Any, batch: bool = True) -> tuple[list[Any], np.ndarray]:
    shape = [1, 16] if batch else [16]
    a = np.arange(16, dtype=np.float32).reshape(shape)
    inputs = [mod.InferInput("INPUT0", shape, "FP32"), mod.InferInput("INPUT1", shape, "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(np.ones_like(a))
    return inputs, a


def _index(client: httpclient.InferenceServerClient) -> dict[str, dict[str, Any]]:
    return {m["name"]: m for m in client.get_model_repository_index()}


def test_explicit_mode_loads_only_what_it_is_asked(explicit: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(explicit.url)
    try:
        index = _index(client)
        assert index["identity_fp32"]["state"] == "READY"
        assert index["add_sub"] == {"name": "add_sub"}  # in the repository, not loaded
        assert not client.is_model_ready("add_sub")
        client.load_model("add_sub")
        assert client.is_model_ready("add_sub")
        inputs, a = _add_sub_inputs(httpclient)
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT0"), a + 1)
        with pytest.raises(InferenceServerException) as e:
            client.load_model("no_such_model")
        assert e.value.status() == "500"
        assert "failed to load 'no_such_model', failed to poll from model repository" in e.value.message()
        client.unload_model("no_such_model")  # as the reference: nothing to do, no error
    finally:
        client.close()


def test_a_broken_model_fails_its_load_with_the_reason_and_the_others_serve(explicit: InferdProcess) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{explicit.grpc_port}")
    try:
        with pytest.raises(InferenceServerException) as e:
            client.load_model("broken")
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert e.value.message().startswith(
            "load failed for model 'broken': version 1 is at UNAVAILABLE state:"
        )
        assert "broken on purpose" in e.value.message()
        entry = next(m for m in client.get_model_repository_index().models if m.name == "broken")
        assert entry.state == "UNAVAILABLE" and "broken on purpose" in entry.reason
        assert client.is_model_ready("identity_fp32")
    finally:
        client.close()


def test_an_ensemble_loads_its_steps_and_unload_dependents_takes_it_down(explicit: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(explicit.url)
    try:
        client.load_model("ensemble_add_sub")
        assert client.is_model_ready("mul_fp32") and client.is_model_ready("add_sub")
        inputs, a = _add_sub_inputs(httpclient, batch=True)
        out = client.infer("ensemble_add_sub", inputs).as_numpy("OUTPUT0")
        np.testing.assert_allclose(out, (a + 1) * (a - 1))
        client.unload_model("add_sub", unload_dependents=True)
        index = _index(client)
        assert (
            index["ensemble_add_sub"]["state"] == "UNAVAILABLE"
            and index["ensemble_add_sub"]["reason"] == "unloaded"
        )
        assert index["add_sub"]["state"] == "UNAVAILABLE"
        assert index["mul_fp32"]["state"] == "READY"  # a step, not a dependent
    finally:
        client.close()


def test_unload_dependents_takes_the_steps_loaded_only_for_the_ensemble(explicit: InferdProcess) -> None:
    """As the reference's dependency graph (checked on Triton 2.51): unload_dependents on an ensemble
    unloads the steps its load brought in, not the steps loaded by name; unloading a step unloads the
    ensembles using it, whose ready check then answers 400 and whose requests 404."""
    client = httpclient.InferenceServerClient(explicit.url)
    try:
        for name in ("ensemble_add_sub", "add_sub", "mul_fp32"):
            client.unload_model(name)
        client.load_model("ensemble_add_sub")  # brings add_sub and mul_fp32 in
        client.unload_model("ensemble_add_sub", unload_dependents=True)
        index = _index(client)
        assert [index[m]["state"] for m in ("ensemble_add_sub", "add_sub", "mul_fp32")] == ["UNAVAILABLE"] * 3
        assert index["add_sub"]["reason"] == "unloaded"

        client.load_model("add_sub")  # by name: not the ensemble's to take along
        client.load_model("ensemble_add_sub")
        client.unload_model("ensemble_add_sub", unload_dependents=True)
        index = _index(client)
        assert (index["add_sub"]["state"], index["mul_fp32"]["state"]) == ("READY", "UNAVAILABLE")

        client.load_model("ensemble_add_sub")
        client.unload_model("ensemble_add_sub")  # without the parameter: the steps stay
        assert client.is_model_ready("add_sub") and client.is_model_ready("mul_fp32")

        client.load_model("ensemble_add_sub")
        client.unload_model("mul_fp32")  # a step goes: the ensemble cannot serve and goes too
        index = _index(client)
        assert index["ensemble_add_sub"]["state"] == "UNAVAILABLE"
        assert index["ensemble_add_sub"]["reason"] == "unloaded"
        ready = explicit.request("GET", "/v2/models/ensemble_add_sub/ready")
        assert ready.status == 400
        inputs, _ = _add_sub_inputs(httpclient, batch=True)
        with pytest.raises(InferenceServerException) as e:
            client.infer("ensemble_add_sub", inputs)
        assert e.value.status() == "404"
        assert "Request for unknown model: 'ensemble_add_sub' has no available versions" in e.value.message()
        assert client.is_model_ready("add_sub")
    finally:
        client.close()


def test_config_and_file_overrides(explicit: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(explicit.url)
    gclient = grpcclient.InferenceServerClient(f"127.0.0.1:{explicit.grpc_port}")
    repo = explicit.repository
    before = sorted(p.relative_to(repo) for p in repo.rglob("*") if "__pycache__" not in p.parts)
    try:
        client.load_model("add_sub", config=ADD_SUB_CONFIG)
        assert client.get_model_config("add_sub")["max_batch_size"] == 8
        inputs, a = _add_sub_inputs(httpclient, batch=True)
        np.testing.assert_array_equal(client.infer("add_sub", inputs).as_numpy("OUTPUT1"), a - 1)
        # a model that exists only in the request: its files go to a private folder
        model_py = (REFERENCE_MODELS / "add_sub" / "1" / "model.py").read_bytes()
        config = ADD_SUB_CONFIG.replace('"max_batch_size":8', '"max_batch_size":0')
        gclient.load_model("sent_model", config=config, files={"file:1/model.py": model_py})
        inputs, a = _add_sub_inputs(grpcclient, batch=False)
        np.testing.assert_array_equal(gclient.infer("sent_model", inputs).as_numpy("OUTPUT0"), a + 1)
        # a file override that would leave its folder, and files without a config
        with pytest.raises(InferenceServerException, match="must stay within the model directory"):
            client.load_model("sent_model", config=config, files={"file:../../escaped.py": b"x = 1"})
        with pytest.raises(
            InferenceServerException, match="'config' must be specified for model file override"
        ):
            client.load_model("sent_model", files={"file:1/model.py": model_py})
        with pytest.raises(InferenceServerException, match="Invalid config override"):
            client.load_model("add_sub", config="{not json")
        # a reload that fails leaves the loaded version serving
        with pytest.raises(InferenceServerException, match="load failed for model 'add_sub'"):
            client.load_model(
                "add_sub", config=ADD_SUB_CONFIG, files={"file:1/model.py": BROKEN_MODEL.encode()}
            )
        assert client.get_model_config("add_sub")["max_batch_size"] == 8
        assert (
            client.infer("add_sub", _add_sub_inputs(httpclient, batch=True)[0]).as_numpy("OUTPUT0")
            is not None
        )
        gclient.unload_model("sent_model")
        assert not gclient.is_model_ready("sent_model")
    finally:
        client.close()
        gclient.close()
    after = sorted(p.relative_to(repo) for p in repo.rglob("*") if "__pycache__" not in p.parts)
    assert after == before  # nothing was written into the repository
    assert not (repo.parent / "escaped.py").exists()


def test_unload_answers_once_the_requests_in_flight_are_done(explicit: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(explicit.url, network_timeout=60)
    try:
        client.load_model("sleeper")
        done: list[Any] = []

        def slow() -> None:
            c = httpclient.InferenceServerClient(explicit.url, network_timeout=60)
            i = httpclient.InferInput("MS", [1], "INT32").set_data_from_numpy(np.array([800], np.int32))
            try:
                done.append(c.infer("sleeper", [i]).as_numpy("OUT").tolist())
            except InferenceServerException as e:
                done.append(e)
            finally:
                c.close()

        t = threading.Thread(target=slow)
        t.start()
        wait_for_file(explicit.repository / "sleeper" / "executing")
        t0 = time.monotonic()
        client.unload_model("sleeper")
        assert time.monotonic() - t0 > 0.1  # the unload waited for the execute in flight
        assert not client.is_model_ready("sleeper")
        # the request in flight was answered, not failed (its client thread may read the answer a
        # moment after the unload's: both go out, in that order, on two connections)
        t.join(10)
        assert done == [[800]], done
    finally:
        client.close()


def test_reloads_under_load_fail_no_request(explicit: InferdProcess) -> None:
    client = httpclient.InferenceServerClient(explicit.url)
    client.load_model("identity_fp32")
    stop = threading.Event()
    failures: list[str] = []
    counts = [0] * 8

    def load(worker: int) -> None:
        c = grpcclient.InferenceServerClient(f"127.0.0.1:{explicit.grpc_port}")
        i = grpcclient.InferInput("INPUT0", [4], "FP32").set_data_from_numpy(np.arange(4, dtype=np.float32))
        try:
            while not stop.is_set():
                try:
                    out = c.infer("identity_fp32", [i]).as_numpy("OUTPUT0")
                    assert out.tolist() == [0, 1, 2, 3]
                    counts[worker] += 1
                except InferenceServerException as e:
                    failures.append(e.message())
        finally:
            c.close()

    threads = [threading.Thread(target=load, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    config = client.get_model_config("identity_fp32")
    try:
        for i in range(30):  # a changed parameter each time: a reload in full (an unchanged model's is none)
            config["parameters"] = {"generation": {"string_value": str(i)}}
            client.load_model("identity_fp32", config=json.dumps(config))
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        client.close()
    assert failures == []
    assert sum(counts) > 30


def test_poll_mode_follows_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    shutil.copytree(REFERENCE_MODELS / "identity_fp32", repo / "identity_fp32")
    proc = InferdProcess(
        repo, tmp_path / "inferd.log", ("--model-control-mode=poll", "--repository-poll-secs=1")
    ).start()
    client = httpclient.InferenceServerClient(proc.url)
    try:
        with pytest.raises(InferenceServerException, match="polling is enabled"):
            client.load_model("identity_fp32")
        shutil.copytree(REFERENCE_MODELS / "add_sub", repo / "add_sub")
        wait_until(lambda: client.is_model_ready("add_sub"), "add_sub to be loaded")
        config = repo / "add_sub" / "config.pbtxt"
        config.write_text(
            config.read_text() + '\nparameters { key: "marker" value: { string_value: "2" } }\n'
        )
        wait_until(
            lambda: client.get_model_config("add_sub").get("parameters", {}).get("marker") is not None,
            "add_sub's new config",
        )
        assert client.is_model_ready("add_sub")
        shutil.rmtree(repo / "add_sub")
        wait_until(lambda: not client.is_model_ready("add_sub"), "add_sub to be unloaded")
        assert client.is_model_ready("identity_fp32")
    finally:
        client.close()
        proc.stop()


@pytest.mark.parametrize(
    ("model", "config"),
    [("no_such_model", None), ("identity_fp32", "{"), ("identity_fp32", '{"nonsense": 1}')],
)
def test_grpc_failed_loads_answer_as_the_reference(
    explicit: InferdProcess, model: str, config: str | None
) -> None:
    """Recorded on Triton 2.51 (explicit mode, gRPC): a missing model and an invalid config override
    both answer INTERNAL "failed to load '<model>', failed to poll from model repository"; inferd
    adds the reason after it (README: a failed load says why). The model already serving stays so."""
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{explicit.grpc_port}")
    try:
        with pytest.raises(InferenceServerException) as e:
            client.load_model(model, config=config)
        assert e.value.status() == "StatusCode.INTERNAL"
        assert e.value.message().startswith(
            f"failed to load '{model}', failed to poll from model repository: "
        )
        assert client.is_model_ready("identity_fp32")
    finally:
        client.close()
