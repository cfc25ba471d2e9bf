"""A load's file overrides never touch a file outside the server's own temporary folder, whatever
model name a client sends (issue 25: a name of ``..`` once made the server write beside, and then
remove the parent of, its temporary folder).

The server runs with ``TMPDIR`` six folders deep inside a sandbox this test makes, with sentinel
files at every level and a working directory inside it: even a server that joined the name to a
path could reach nothing outside the sandbox with the at most four ``..`` parts generated here.
Every generated name is loaded with a good model and unloaded, and loaded with a model that
fails, over HTTP and over gRPC; afterwards the sandbox outside ``TMPDIR`` is byte-for-byte what it
was and no override folder is left in ``TMPDIR``.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import tritonclient.grpc as grpcclient
from conftest import InferdProcess
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

CONFIG = json.dumps(
    {
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
    }
)
GOOD = b"""
class TritonPythonModel:
    def execute(self, requests):
        return []
"""
BAD = b"raise RuntimeError('this model does not load')\n"
DEPTH = 6  # folders between the sandbox and TMPDIR: more than the ".." parts of any name below

_PART = st.sampled_from(["..", ".", "", "x", "y z", "é", "a\\b", "%2e%2e", "...", "~", "\x01", "-"])
NAMES = (
    st.lists(_PART, min_size=1, max_size=4).map("/".join)
    | st.text(st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=12)
).filter(lambda n: bool(n) and "\x00" not in n and n.count("..") <= 4)


def _snapshot(root: Path, skip: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file and folder under ``root`` but those inside ``skip``: mode, size and contents."""
    out: dict[str, tuple[int, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here == skip:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            p = here / name
            st_ = p.lstat()
            data = p.read_bytes() if p.is_file() and not p.is_symlink() else b""
            out[str(p.relative_to(root))] = (st_.st_mode, st_.st_size, data)
    return out


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, InferdProcess]]:
    base = tmp_path_factory.mktemp("override-sandbox")
    deep = base.joinpath(*(f"d{i}" for i in range(DEPTH)))
    tmpdir = deep / "tmp"
    tmpdir.mkdir(parents=True)
    level = base
    for i in range(DEPTH + 1):
        (level / "sentinel.txt").write_text(f"level {i}\n")
        (level / "keep").mkdir(exist_ok=True)
        (level / "keep" / "file").write_text("keep me\n")
        level = level / f"d{i}"
    repository = base / "repository"
    repository.mkdir()
    proc = InferdProcess(
        repository,
        base.parent / "override-sandbox.log",
        ("--model-control-mode=explicit",),
        env={"TMPDIR": str(tmpdir)},
        cwd=deep,
    ).start()
    try:
        yield base, tmpdir, proc
    finally:
        assert proc.stop() == 0, proc.log()[-4000:]


def _http_load(proc: InferdProcess, name: str, model: bytes) -> int:
    body = json.dumps({"parameters": {"config": CONFIG, "file:1/model.py": base64.b64encode(model).decode()}})
    # the name goes on the wire as a client may send it: '/' and '.' unescaped, the rest quoted
    path = f"/v2/repository/models/{quote(name, safe='/.')}/load"
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=60)
    try:
        conn.request("POST", path, body=body)
        r = conn.getresponse()
        r.read()
        return r.status
    finally:
        conn.close()


def _http_unload(proc: InferdProcess, name: str) -> None:
    proc.request("POST", f"/v2/repository/models/{quote(name, safe='/.')}/unload", {})


@pytest.mark.timeout(400)  # each example loads four uploads, each in worker processes of its own
@settings(
    max_examples=20,  # (~2 s an example, 5 s on a loaded 2-core machine)
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=NAMES)
def test_no_name_writes_or_removes_outside_the_servers_folder(
    sandbox: tuple[Path, Path, InferdProcess], name: str
) -> None:
    base, tmpdir, proc = sandbox
    before = _snapshot(base, tmpdir)
    for model in (GOOD, BAD):
        status = _http_load(proc, name, model)
        assert status in (200, 400, 404), status
        _http_unload(proc, name)
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    try:
        for model in (GOOD, BAD):
            try:
                client.load_model(name, config=CONFIG, files={"file:1/model.py": model})
            except InferenceServerException as e:
                assert model is BAD or "load failed" not in str(e), e
            try:
                client.unload_model(name)
            except InferenceServerException:
                pass
    finally:
        client.close()
    assert _snapshot(base, tmpdir) == before
    assert not [p.name for p in tmpdir.iterdir() if p.name.startswith("inferd-override-")]
    assert proc.request("GET", "/v2/health/live").status == 200


def test_names_the_reference_loads_load_here_too(sandbox: tuple[Path, Path, InferdProcess]) -> None:
    """Triton 2.51 loads a sent model under any name (its files sit in its temporary folder, never
    under the name): so does inferd, and the model answers under that name."""
    _, tmpdir, proc = sandbox
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{proc.grpc_port}")
    try:
        for name in ("..", "x/../../y", "../name", "."):
            client.load_model(name, config=CONFIG, files={"file:1/model.py": GOOD})
            assert client.is_model_ready(name)
            client.unload_model(name)
            assert not client.is_model_ready(name)
    finally:
        client.close()
    assert _http_load(proc, "..", GOOD) == 200
    _http_unload(proc, "..")
    assert not [p.name for p in tmpdir.iterdir() if p.name.startswith("inferd-override-")]
