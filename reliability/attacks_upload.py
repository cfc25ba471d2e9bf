"""Issue 42's findings about what a repository load may ask for. Each case starts a server of its
own in explicit mode, with ``TMPDIR`` in a sandbox the case makes, and aims only at folders it
creates:

- ``config_file_names``: a config-only reload of a loaded model whose ``default_model_filename`` is
  absolute or climbs out with ``..`` (HTTP and gRPC): refused, the named file never imported (it ran
  any readable ``.py`` before);
- ``override_writes``: ``file:`` overrides that cannot be written (a NUL, ``1`` beside
  ``1/model.py``, a 300-character name, a 2,000-deep path) over HTTP and gRPC: each answered 400 /
  INVALID_ARGUMENT (HTTP never answered; gRPC answered INTERNAL with Python's exception text);
- ``config_sizes``: config overrides with 10,000 and 30,000 inputs, ``count: 100000`` instances and
  JSON nested 100,000 deep: each answered quickly, nothing kept (10,000 inputs took 17 s and held
  the load lock, 30,000 over 90 s; 100,000 instances made 21,962 threads and kept them and 770 MB);
- ``upload_bytes``: uploads past ``--model-upload-max-bytes`` refused until one is unloaded (481 MB
  were accepted before);
- ``override_sweep``: the override folders of a server killed with SIGKILL are removed when the next
  server starts (they stayed for ever).

``CASES`` maps a name to (what, expected, which limit the RSS goal uses, function).

    python -m reliability.attacks_upload [CASE ...]        (INFERD_SRC=<tree>/src: attack another tree)
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from reliability.common import MiB, Server

_IDENTITY = b"""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN")
                .as_numpy())]) for r in requests]
"""
_CONFIG: dict[str, Any] = {
    "backend": "python",
    "max_batch_size": 0,
    "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
    "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
}
UPLOAD_LIMIT = 8 * MiB


@contextmanager
def _victim(server: Server, name: str, args: tuple[str, ...] = ()) -> Iterator[tuple[Server, Path]]:
    """A server of its own serving ``ident`` in explicit mode, its TMPDIR in a fresh sandbox."""
    work = server.log_path.parent
    base = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=work))
    repo = base / "repository"
    (repo / "ident" / "1").mkdir(parents=True)
    (repo / "ident" / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 0\n'
        'input [{ name: "IN" data_type: TYPE_FP32 dims: [ 1 ] }]\n'
        'output [{ name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] }]\n'
    )
    (repo / "ident" / "1" / "model.py").write_bytes(_IDENTITY)
    (base / "tmp").mkdir()
    victim = Server(
        repo,
        work / f"{name}.log",
        ["--model-control-mode=explicit", "--load-model=*", *args],
        env={"TMPDIR": str(base / "tmp")},
    ).start()
    try:
        yield victim, base
    finally:
        victim.stop()


def _http_load(
    victim: Server, name: str, config: str, files: dict[str, bytes], timeout: float = 120.0
) -> tuple[int | str, str, float]:
    """(status or what went wrong instead, the error text, seconds)."""
    params = {"config": config, **{f"file:{k}": base64.b64encode(v).decode() for k, v in files.items()}}
    t0 = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", victim.http_port, timeout=timeout)
    try:
        conn.request("POST", f"/v2/repository/models/{name}/load", body=json.dumps({"parameters": params}))
        r = conn.getresponse()
        body = r.read()
        try:
            error = json.loads(body).get("error", "") if body else ""
        except ValueError:
            error = body[:200].decode(errors="replace")
        return r.status, error, time.monotonic() - t0
    except (OSError, http.client.HTTPException) as e:
        return type(e).__name__, "", time.monotonic() - t0
    finally:
        conn.close()


def _grpc_load(
    victim: Server, name: str, config: str, files: dict[str, bytes], timeout: float = 120.0
) -> tuple[str, str, float]:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    req = service_pb2.RepositoryModelLoadRequest(model_name=name)
    req.parameters["config"].string_param = config
    for k, v in files.items():
        req.parameters[f"file:{k}"].bytes_param = v
    t0 = time.monotonic()
    with grpc.insecure_channel(f"127.0.0.1:{victim.grpc_port}") as channel:
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        try:
            stub.RepositoryModelLoad(req, timeout=timeout)
            return "OK", "", time.monotonic() - t0
        except grpc.RpcError as e:
            return e.code().name, e.details() or "", time.monotonic() - t0


def _serves(victim: Server) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", victim.http_port, timeout=10)
    try:
        body = json.dumps({"inputs": [{"name": "IN", "datatype": "FP32", "shape": [1], "data": [2.0]}]})
        conn.request("POST", "/v2/models/ident/infer", body=body)
        r = conn.getresponse()
        return r.status == 200 and json.loads(r.read())["outputs"][0]["data"] == [2.0]
    except (OSError, http.client.HTTPException, ValueError, KeyError):
        return False
    finally:
        conn.close()


def _threads(victim: Server) -> int:
    return victim.status_kib("Threads")


# -- the cases ----------------------------------------------------------------------------------------
def config_file_names(server: Server, cfg: Any) -> tuple[str, bool, str]:
    with _victim(server, "config-file-names") as (victim, base):
        evil = base / "evil.py"
        marker = base / "RAN"
        evil.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
        answers = []
        for filename in (str(evil), "../../../evil.py", "sub/../../../../evil.py"):
            config = json.dumps({**_CONFIG, "default_model_filename": filename})
            status, _, _ = _http_load(victim, "ident", config, {})
            code, _, _ = _grpc_load(victim, "ident", config, {})
            answers.append(f"{status}/{code}")
        ran, serving = marker.exists(), _serves(victim)
    ok = not ran and serving and all(a == "500/INTERNAL" for a in answers)
    return (
        f"answers (HTTP/gRPC) {', '.join(answers)}; the file ran: {ran}; the loaded version serves: {serving}",
        ok,
        "3 file names x 2 protocols",
    )


BAD_FILES: dict[str, dict[str, bytes]] = {
    "NUL": {"1/a\0b.py": b"x", "1/model.py": _IDENTITY},
    "1 beside 1/model.py": {"1": b"x", "1/model.py": _IDENTITY},
    "300-char name": {"a" * 300 + "/model.py": b"x", "1/model.py": _IDENTITY},
    "2,000-deep path": {"d/" * 2000 + "m.py": b"x", "1/model.py": _IDENTITY},
}


def override_writes(server: Server, cfg: Any) -> tuple[str, bool, str]:
    config = json.dumps(_CONFIG)
    answers, worst, clean = [], 0.0, True
    with _victim(server, "override-writes") as (victim, base):
        for what, files in BAD_FILES.items():
            status, error, s1 = _http_load(victim, "sent", config, files, timeout=30.0)
            code, details, s2 = _grpc_load(victim, "sent", config, files, timeout=30.0)
            worst = max(worst, s1, s2)
            clean = clean and "Traceback" not in details and str(base) not in details + error
            answers.append(f"{what}: {status}/{code}")
        left = [p.name for p in (base / "tmp").iterdir()]
        serving = _serves(victim)
    ok = serving and clean and not left and all(a.endswith("400/INVALID_ARGUMENT") for a in answers)
    return (
        f"{'; '.join(answers)}; slowest answer {worst:.2f} s; {len(left)} folders left; serves: {serving}",
        ok,
        "4 paths x 2 protocols",
    )


def config_sizes(server: Server, cfg: Any) -> tuple[str, bool, str]:
    def inputs(n: int) -> str:
        return json.dumps(
            {**_CONFIG, "input": [{"name": f"I{i}", "data_type": "TYPE_FP32", "dims": [1]} for i in range(n)]}
        )

    cases = {
        "10,000 inputs": inputs(10_000),
        "30,000 inputs": inputs(30_000),
        "count 100000": json.dumps({**_CONFIG, "instance_group": [{"count": 100_000, "kind": "KIND_CPU"}]}),
        "JSON 100,000 deep": '{"parameters": ' + "[" * 100_000 + "]" * 100_000 + "}",
    }
    parts, ok = [], True
    with _victim(server, "config-sizes") as (victim, _base):
        threads0, rss0 = _threads(victim), victim.rss()
        for i, (what, config) in enumerate(cases.items()):
            status, _, secs = _http_load(victim, "big", config, {"1/model.py": _IDENTITY}, timeout=60.0)
            parts.append(f"{what}: {status} in {secs:.2f} s")
            ok = ok and isinstance(status, int) and secs < 10.0
            if i == 0:  # the 10,000 inputs serve: their instance's threads (an upload's instance is a
                threads0 = _threads(victim)  # worker process, read by a thread) stay; the refused add none
        threads1, grew = _threads(victim), victim.rss() - rss0
        serving = _serves(victim)
    ok = ok and serving and threads1 <= threads0 + 2 and grew < 64 * MiB
    return (
        f"{'; '.join(parts)}; threads {threads0} -> {threads1}; RSS +{grew / MiB:.1f} MiB; serves: {serving}",
        ok,
        "10,000 inputs are served (a linear check); the rest refused at their cap",
    )


def upload_bytes(server: Server, cfg: Any) -> tuple[str, bool, str]:
    config = json.dumps(_CONFIG)
    pad = b"#" * (UPLOAD_LIMIT // 4)
    statuses = []
    with _victim(server, "upload-bytes", (f"--model-upload-max-bytes={UPLOAD_LIMIT}",)) as (victim, base):
        for i in range(4):  # the fourth passes the bound
            statuses.append(_http_load(victim, f"up{i}", config, {"1/model.py": _IDENTITY, "1/pad": pad})[0])
        conn = http.client.HTTPConnection("127.0.0.1", victim.http_port, timeout=60)
        conn.request("POST", "/v2/repository/models/up0/unload", body=b"{}")
        conn.getresponse().read()
        conn.close()
        statuses.append(_http_load(victim, "up3", config, {"1/model.py": _IDENTITY, "1/pad": pad})[0])
        held = sum(f.stat().st_size for f in (base / "tmp").rglob("*") if f.is_file())
        serving = _serves(victim)
    ok = statuses == [200, 200, 200, 400, 200] and held <= UPLOAD_LIMIT and serving
    return (
        f"answers {statuses} (the 4th past the bound, the 5th after an unload); {held / MiB:.1f} MiB on disk",
        ok,
        f"--model-upload-max-bytes {UPLOAD_LIMIT // MiB} MiB",
    )


def override_sweep(server: Server, cfg: Any) -> tuple[str, bool, str]:
    with _victim(server, "override-sweep") as (victim, base):
        status = _http_load(victim, "up", json.dumps(_CONFIG), {"1/model.py": _IDENTITY})[0]
        left = [p for p in (base / "tmp").iterdir() if p.name.startswith("inferd-override-")]
        assert victim.proc is not None
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait(10)
        after_kill = [p for p in left if p.exists()]
        victim.start()  # the next server, with the same TMPDIR
        after_start = [p for p in left if p.exists()]
        serving = _serves(victim)
    ok = status == 200 and len(after_kill) == 1 and not after_start and serving
    return (
        f"{len(after_kill)} override folder(s) after SIGKILL, {len(after_start)} once the next server started",
        ok,
        "",
    )


CASES: dict[str, tuple[str, str, str, Callable[[Server, Any], tuple[str, bool, str]]]] = {
    # name: (what, expected, which limit the RSS goal uses, function)
    "config_file_names": (
        "config-only reloads whose default_model_filename is absolute or climbs out with '..' (HTTP and gRPC)",
        "500 / INTERNAL as the reference's answer to an invalid config; the named file never runs; the loaded "
        "version serves on",
        "body",
        config_file_names,
    ),
    "override_writes": (
        "file: overrides that cannot be written (NUL, '1' beside '1/model.py', 300-char name, 2,000-deep path)",
        "400 / INVALID_ARGUMENT at once on both protocols, no Python text or server path, no folder left",
        "body",
        override_writes,
    ),
    "config_sizes": (
        "config overrides with 10,000 and 30,000 inputs, count 100000 instances, JSON nested 100,000 deep",
        "each answered within 10 s; no thread or memory kept",
        "body",
        config_sizes,
    ),
    "upload_bytes": (
        f"uploads of {UPLOAD_LIMIT // 4 // MiB} MiB each past --model-upload-max-bytes {UPLOAD_LIMIT // MiB} MiB",
        "400 past the bound, room again after an unload",
        "body",
        upload_bytes,
    ),
    "override_sweep": (
        "a server killed with SIGKILL after an upload, then started again",
        "its override folder removed at the next start",
        "body",
        override_sweep,
    ),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m reliability.attacks_upload", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("cases", nargs="*", default=list(CASES), help=", ".join(CASES))
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="inferd-upload-"))
    (work / "repo").mkdir()
    host = Server(work / "repo", work / "host.log")  # only says where the cases write
    failed = 0
    for name in args.cases:
        got, ok, note = CASES[name][3](host, None)
        failed += not ok
        print(f"{name}: {'ok' if ok else 'MISS'}: {got}" + (f" ({note})" if note else ""), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
