"""What a client's repository load may ask for (issue 42): config fields that name files stay in
their folder, file overrides that cannot be written are answered 400 / INVALID_ARGUMENT on both
protocols, counts and bytes are capped, a failed load gives back the threads it started, and the
override folders a killed server left are removed at the next start. The server keeps serving
throughout, and is checked to."""

from __future__ import annotations

import base64
import http.client
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess
from tritonclient.utils import InferenceServerException

IDENTITY = b"""
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        if args["model_instance_name"].endswith("_5"):  # FAIL_AT_5: the sixth instance cannot start
            raise RuntimeError("instance 5 does not start")

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return out
"""


def _config(**extra: Any) -> dict[str, Any]:
    return {
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
        **extra,
    }


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("upload-limits")
    for name in ("pm", "other"):
        (base / "repository" / name / "1").mkdir(parents=True)
        (base / "repository" / name / "1" / "model.py").write_bytes(IDENTITY.replace(b"_5", b"_never"))
        (base / "repository" / name / "config.pbtxt").write_text(
            'backend: "python"\nmax_batch_size: 0\n'
            'input [{name: "IN" data_type: TYPE_FP32 dims: [1]}]\n'
            'output [{name: "OUT" data_type: TYPE_FP32 dims: [1]}]\n'
        )
    (base / "evil").mkdir()
    (base / "evil" / "evil.py").write_text(
        f"open({str(base / 'PWNED')!r}, 'w').write('ran')\n"
        "class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
    )
    (base / "tmp").mkdir()
    return base


def _start(sandbox: Path, name: str) -> InferdProcess:
    return InferdProcess(
        sandbox / "repository",
        sandbox / f"{name}.log",
        ("--model-control-mode=explicit", "--load-model=*", "--model-upload-max-bytes=1000000"),
        env={"TMPDIR": str(sandbox / "tmp")},
    ).start()


@pytest.fixture(scope="module")
def server(sandbox: Path) -> Iterator[InferdProcess]:
    proc = _start(sandbox, "server")
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log()[-4000:]


def _serves(proc: InferdProcess, model: str = "other") -> None:
    client = httpclient.InferenceServerClient(proc.url)
    try:
        x = httpclient.InferInput("IN", [1], "FP32")
        x.set_data_from_numpy(np.array([3.0], dtype=np.float32))
        assert client.infer(model, [x]).as_numpy("OUT").tolist() == [3.0]
    finally:
        client.close()


def _ready(proc: InferdProcess) -> None:
    """A load the server refused while reading its config leaves the server ready (as the
    reference: a typo in one load does not take a pod out of service), over both protocols."""
    assert proc.request("GET", "/v2/health/ready").status == 200
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    try:
        assert client.is_server_ready()
    finally:
        client.close()


def _http_load(
    proc: InferdProcess, name: str, config: dict[str, Any], files: dict[str, bytes]
) -> tuple[int, str]:
    params: dict[str, str] = {"config": json.dumps(config)}
    params.update({f"file:{k}": base64.b64encode(v).decode() for k, v in files.items()})
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=60)
    try:
        conn.request("POST", f"/v2/repository/models/{name}/load", body=json.dumps({"parameters": params}))
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}").get("error", "")
    finally:
        conn.close()


def _grpc_load(
    proc: InferdProcess, name: str, config: dict[str, Any], files: dict[str, bytes]
) -> grpc.RpcError:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    try:
        with pytest.raises(InferenceServerException) as e:
            client.load_model(
                name, config=json.dumps(config), files={f"file:{k}": v for k, v in files.items()}
            )
        return e.value
    finally:
        client.close()


@pytest.mark.parametrize("filename", ["{evil}", "../../../evil/evil.py", "sub/../../../../evil/evil.py"])
def test_default_model_filename_outside_the_version_folder_is_refused_on_a_config_only_reload(
    server: InferdProcess, sandbox: Path, filename: str
) -> None:
    filename = filename.format(evil=sandbox / "evil" / "evil.py")
    config = _config(default_model_filename=filename)
    status, error = _http_load(server, "pm", config, {})
    # a config the server refuses when it reads it: as the reference's answer to any invalid config
    assert status == 500
    assert error.startswith(
        "failed to load 'pm', failed to poll from model repository: default_model_filename"
    )
    assert "must name a file inside the version folder" in error
    e = _grpc_load(server, "pm", config, {})
    assert "StatusCode.INTERNAL" in str(e.status()) and "must name a file inside" in str(e)
    assert not (sandbox / "PWNED").exists()  # the file was never imported
    _serves(server, "pm")  # the loaded version serves on
    _ready(server)


BAD_FILES = [
    ({"1/a\0b.py": b"x"}, "holds a NUL character"),
    ({"1": b"x", "1/model.py": IDENTITY}, "'file:1' is a file, not a folder"),
    ({"a" * 300 + "/model.py": b"x", "1/model.py": IDENTITY}, "longer than 255 bytes"),
    ({"d/" * 2000 + "m.py": b"x", "1/model.py": IDENTITY}, "2001 names deep"),
]


@pytest.mark.parametrize(("files", "why"), BAD_FILES)
def test_a_file_override_that_cannot_be_written_is_answered_on_both_protocols(
    server: InferdProcess, sandbox: Path, files: dict[str, bytes], why: str
) -> None:
    before = sorted(os.listdir(sandbox / "tmp"))
    status, error = _http_load(server, "sent", _config(), files)
    assert status == 400 and why in error
    assert error.startswith(
        "failed to load 'sent', failed to poll from model repository: Invalid file parameter"
    )
    e = _grpc_load(server, "sent", _config(), files)
    assert "StatusCode.INVALID_ARGUMENT" in str(e.status()) and why in str(e)
    assert "Traceback" not in str(e) and str(sandbox) not in str(e)
    assert sorted(os.listdir(sandbox / "tmp")) == before  # nothing left behind
    _serves(server)


def _threads(proc: InferdProcess) -> int:
    assert proc.proc is not None
    for line in Path(f"/proc/{proc.proc.pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


def test_an_instance_count_past_the_cap_is_refused_before_any_thread_starts(server: InferdProcess) -> None:
    before = _threads(server)
    status, error = _http_load(
        server, "pm", _config(instance_group=[{"count": 100000, "kind": "KIND_CPU"}]), {}
    )
    assert status == 500 and "asks for 100000 instances; at most 1024" in error
    assert _threads(server) <= before
    _serves(server, "pm")
    _ready(server)


def test_a_load_that_fails_part_way_gives_back_its_threads(server: InferdProcess) -> None:
    """Eight instances, the sixth failing in initialize: the five started are unloaded and their
    threads end (the server's thread count comes back). An upload's instances are worker processes
    whatever its config asks (backends/process/uploaded.py): the threads are their readers."""
    _serves(server)
    # an upload that loads: the threads that live on once the first worker started (its spawner, the
    # memory watch) are counted in ``before``
    assert _http_load(server, "warm", _config(), {"1/model.py": IDENTITY.replace(b"_5", b"_never")})[0] == 200
    assert server.request("POST", "/v2/repository/models/warm/unload", {}).status == 200
    before = _threads(server)
    config = _config(
        instance_group=[{"count": 8, "kind": "KIND_CPU"}],
        parameters={"execution_mode": {"string_value": "thread"}},
    )
    status, error = _http_load(server, "failing", config, {"1/model.py": IDENTITY})
    assert status == 400 and "instance 5 does not start" in error
    assert _threads(server) <= before + 1  # a pooled helper thread may have started meanwhile
    _serves(server)


def test_a_config_override_nested_thousands_deep_is_refused(server: InferdProcess) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    try:
        body = json.dumps({"parameters": {"config": '{"parameters": ' + deep + "}"}})
        conn.request("POST", "/v2/repository/models/pm/load", body=body)
        r = conn.getresponse()
        doc = json.loads(r.read())
    finally:
        conn.close()
    assert r.status in (400, 500) and "Invalid config override" in doc["error"]
    _serves(server, "pm")


def test_uploaded_bytes_are_bounded_and_freed_by_an_unload(server: InferdProcess) -> None:
    padding = b"#" * 600_000
    assert _http_load(server, "big_a", _config(), {"1/model.py": IDENTITY, "1/pad": padding})[0] == 200
    status, error = _http_load(server, "big_b", _config(), {"1/model.py": IDENTITY, "1/pad": padding})
    assert status == 400 and "exceed --model-upload-max-bytes (1000000)" in error
    client = httpclient.InferenceServerClient(server.url)
    try:
        client.unload_model("big_a")
    finally:
        client.close()
    assert _http_load(server, "big_b", _config(), {"1/model.py": IDENTITY, "1/pad": padding})[0] == 200
    _serves(server, "big_b")


def test_the_folders_a_killed_server_left_are_removed_at_the_next_start(sandbox: Path) -> None:
    tmp = sandbox / "tmp"
    first = _start(sandbox, "killed")
    try:
        assert _http_load(first, "up", _config(), {"1/model.py": IDENTITY})[0] == 200
        assert first.proc is not None
        left = [p for p in tmp.iterdir() if p.name.startswith(f"inferd-override-{first.proc.pid}-")]
        assert len(left) == 1
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
    finally:
        first.kill()
    assert left[0].exists()  # a killed server removes nothing
    second = _start(sandbox, "after")
    try:
        assert not left[0].exists()
        _serves(second)
    finally:
        assert second.stop() == 0
