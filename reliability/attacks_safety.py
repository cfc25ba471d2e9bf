"""Issue 25's findings about names, sizes and access (the flow and lifecycle ones are in
attacks_flow.py and attacks_lifecycle.py). Each case starts the servers it needs (the ``server``
it is given only says where to write) and aims only at folders it creates:

- ``override_names``: repository loads with a config and a ``file:`` override under model names a
  client can send (``..``, ``x/../../y``, ``../name``, ``/``, a NUL, ...), over HTTP and gRPC, each
  loaded with a good and a failing model and unloaded, by a server whose ``TMPDIR`` lies six
  folders deep in a sandbox of sentinel files: nothing outside ``TMPDIR`` may change, and no
  override folder may be left in it (one such request once deleted a system directory);
- ``openai_prompts``: 100,000 prompts in one ``/v1/completions`` body (2 MB): refused at once, memory
  flat (it was 100,000 model requests, 197 s and 1.1 GB);
- ``status_page_access``: with a restriction on the statistics APIs, the metrics port's status page
  (every model, its state and failure reasons) is refused without the header;
- ``wire_edges``: an absolute-form request target served as its path, ``X-Content-Type-Options:
  nosniff`` on answers, a repeated restriction header and repeated gRPC metadata counted by their
  first value (as the reference).

``CASES`` maps a name to (what, expected, which limit the RSS goal uses, function).

    python -m reliability.attacks_safety [CASE ...]        (INFERD_SRC=<tree>/src: attack another tree)
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from reliability.common import MiB, Server

CONFIG = json.dumps(
    {
        "backend": "python",
        "max_batch_size": 0,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [1]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [1]}],
    }
)
GOOD = b"class TritonPythonModel:\n    def execute(self, requests):\n        return []\n"
BAD = b"raise RuntimeError('this model does not load')\n"
DEPTH = 6  # folders between the sandbox and TMPDIR: more than the '..' parts of any name below
NAMES = [
    "..",
    "../..",
    "x/../../y",
    "../name",
    "../../../../sentinel.txt",
    ".",
    "/",
    "a\\b",
    "%2e%2e",
    "name\x00x",
    "~",
    "d0/../keep",
    "...",
    " ",
]
_IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN")
                .as_numpy())]) for r in requests]
"""


def _snapshot(root: Path, skip: Path) -> dict[str, tuple[int, int, bytes]]:
    out: dict[str, tuple[int, int, bytes]] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if here == skip:
            dirnames[:] = []
            continue
        for name in dirnames + filenames:
            p = here / name
            st = p.lstat()
            data = p.read_bytes() if p.is_file() and not p.is_symlink() else b""
            out[str(p.relative_to(root))] = (st.st_mode, st.st_size, data)
    return out


def _request(
    port: int, method: str, target: str, body: bytes = b"", headers: Any = (), timeout: float = 60.0
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.putrequest(method, target, skip_accept_encoding=True)
        conn.putheader("Content-Length", str(len(body)))
        for k, v in headers:
            conn.putheader(k, v)
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def _identity_repo(work: Path) -> Path:
    """``ident`` (FP32 in, FP32 out) and ``echo_text`` (BYTES in and out: a text model for /v1)."""
    repo = Path(tempfile.mkdtemp(prefix="safety-", dir=work))
    for name, dtype in (("ident", "TYPE_FP32"), ("echo_text", "TYPE_STRING")):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "config.pbtxt").write_text(
            'backend: "python"\nmax_batch_size: 0\n'
            f'input [{{ name: "IN" data_type: {dtype} dims: [ 1 ] }}]\n'
            f'output [{{ name: "OUT" data_type: {dtype} dims: [ 1 ] }}]\n'
        )
        (repo / name / "1" / "model.py").write_text(_IDENTITY)
    return repo


def _try(fn: Callable[[], tuple[int, dict[str, str], bytes]]) -> tuple[int | str, dict[str, str], bytes]:
    """A request's answer, or what went wrong instead (the old code hung or closed on some)."""
    try:
        return fn()
    except (OSError, http.client.HTTPException) as e:
        return type(e).__name__, {}, b""


def _load_twice(victim: Server, stub: Any, name: str, model: bytes, answers: dict[int | str, int]) -> str:
    """``name`` loaded with ``model`` and unloaded, over HTTP then gRPC; the answers counted.
    What went wrong when the server did not answer at all ("" when it did)."""
    import grpc
    from tritonclient.grpc import service_pb2

    body = json.dumps({"parameters": {"config": CONFIG, "file:1/model.py": base64.b64encode(model).decode()}})
    target = f"/v2/repository/models/{quote(name, safe='/.')}"
    status, _, _ = _try(lambda: _request(victim.http_port, "POST", f"{target}/load", body.encode()))
    answers[status] = answers.get(status, 0) + 1
    if isinstance(status, str):
        return f"no answer to a load of {name!r} ({status}); "
    _try(lambda: _request(victim.http_port, "POST", f"{target}/unload", b"{}"))
    req = service_pb2.RepositoryModelLoadRequest(model_name=name)
    req.parameters["config"].string_param = CONFIG
    req.parameters["file:1/model.py"].bytes_param = model
    try:
        stub.RepositoryModelLoad(req, timeout=60)
        answers["OK"] = answers.get("OK", 0) + 1
    except grpc.RpcError as e:
        answers[e.code().name] = answers.get(e.code().name, 0) + 1
        if e.code() is grpc.StatusCode.DEADLINE_EXCEEDED:
            return f"no answer to a gRPC load of {name!r}; "
    try:
        stub.RepositoryModelUnload(service_pb2.RepositoryModelUnloadRequest(model_name=name), timeout=60)
    except grpc.RpcError:
        pass
    return ""


# -- the cases ----------------------------------------------------------------------------------------
def override_names(server: Server, cfg: Any) -> tuple[str, bool, str]:
    import grpc
    from tritonclient.grpc import service_pb2_grpc

    work = server.log_path.parent
    base = Path(tempfile.mkdtemp(prefix="override-sandbox-", dir=work))
    deep = base.joinpath(*(f"d{i}" for i in range(DEPTH)))
    tmpdir = deep / "tmp"
    tmpdir.mkdir(parents=True)
    level = base
    for i in range(DEPTH + 1):
        (level / "sentinel.txt").write_text(f"level {i}\n")
        (level / "keep").mkdir(exist_ok=True)
        (level / "keep" / "file").write_text("keep me\n")
        level = level / f"d{i}"
    (base / "repository").mkdir()
    victim = Server(
        base / "repository",
        work / "override-names.log",
        ["--model-control-mode=explicit"],
        env={"TMPDIR": str(tmpdir)},
    ).start()
    before = _snapshot(base, tmpdir)
    answers: dict[int | str, int] = {}
    stuck = ""
    try:
        channel = grpc.insecure_channel(f"127.0.0.1:{victim.grpc_port}")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        for name in NAMES:
            for model in (GOOD, BAD):
                stuck = _load_twice(victim, stub, name, model, answers)
                if stuck:  # no answer (the old code hung here): the rest would wait as long
                    break
            if stuck:
                break
        channel.close()
        alive = victim.alive()
    finally:
        victim.stop()
    after = _snapshot(base, tmpdir) if base.exists() else {}
    changed = sorted(
        set(before) ^ set(after) | {k for k in before.keys() & after.keys() if before[k] != after[k]}
    )
    left = (
        sorted(p.name for p in tmpdir.iterdir() if p.name.startswith("inferd-override-"))
        if tmpdir.exists()
        else []
    )
    got = (
        stuck
        + f"{len(changed)} paths outside TMPDIR changed or removed"
        + (f" ({', '.join(changed[:4])}{', ...' if len(changed) > 4 else ''})" if changed else "")
        + f"; {len(left)} override folders left; answers {dict(sorted((str(k), v) for k, v in answers.items()))}"
    )
    return (
        got,
        not stuck and not changed and not left and alive,
        f"{len(NAMES)} names x 2 models x HTTP and gRPC",
    )


def openai_prompts(server: Server, cfg: Any) -> tuple[str, bool, str]:
    prompt = "a prompt of some words"
    # 100,000 as the finding, or as many as fit the server's body limit (make test runs it at 1 MB)
    limit = int(getattr(cfg, "body_limit", 64 * MiB))
    prompts = min(100_000, (limit - 100) // (len(prompt) + 4))
    body = json.dumps({"model": "echo_text", "prompt": [prompt] * prompts}).encode()
    rss0 = server.rss()
    t0 = time.monotonic()
    status, _, answer = _try(
        lambda: _request(
            server.http_port, "POST", "/v1/completions", body, [("Content-Type", "application/json")], 120.0
        )
    )
    secs = time.monotonic() - t0
    grew = server.rss() - rss0
    try:
        message = json.loads(answer)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = answer[:120].decode(errors="replace")
    got = f"{status} in {secs * 1000:.0f} ms: {message[:110]}; RSS {grew / MiB:+.1f} MiB"
    return (
        got,
        status == 400 and secs < 10 and grew < 64 * MiB,
        f"{prompts:,} prompts, a {len(body) / 1e6:.1f} MB body",
    )


def status_page_access(server: Server, cfg: Any) -> tuple[str, bool, str]:
    work = server.log_path.parent
    victim = Server(
        _identity_repo(work),
        work / "status-access.log",
        ["--http-restricted-api=statistics:stats-key=s3cret"],
    ).start()
    try:
        seen = []
        for path in ("/", "/v2/status"):
            status, _, body = _try(lambda: _request(victim.metrics_port, "GET", path))  # noqa: B023
            seen.append(f"{path} {status}{' with model names' if b'ident' in body else ''}")
        allowed, _, body = _try(
            lambda: _request(victim.metrics_port, "GET", "/v2/status", headers=[("stats-key", "s3cret")])
        )
        metrics, _, _ = _try(lambda: _request(victim.metrics_port, "GET", "/metrics"))
    finally:
        victim.stop()
    refused = all(s.split()[1] == "403" for s in seen)
    got = f"metrics port without the header: {', '.join(seen)}; with it: {allowed}; /metrics {metrics}"
    return (
        got,
        refused and allowed == 200 and metrics == 200,
        "--http-restricted-api=statistics:stats-key=...",
    )


def wire_edges(server: Server, cfg: Any) -> tuple[str, bool, str]:
    import grpc
    from tritonclient.grpc import service_pb2, service_pb2_grpc

    work = server.log_path.parent
    victim = Server(
        _identity_repo(work),
        work / "wire-edges.log",
        ["--http-restricted-api=inference:k=v", "--grpc-restricted-protocol=health:k=v"],
    ).start()
    doc = json.dumps({"inputs": [{"name": "IN", "shape": [1], "datatype": "FP32", "data": [1]}]}).encode()
    results: dict[str, bool] = {}
    try:
        port = victim.http_port
        status, headers, _ = _try(
            lambda: _request(
                port, "POST", f"http://example.com:{port}/v2/models/ident/infer", doc, [("k", "v")]
            )
        )
        results["absolute-form target served"] = status == 200
        results["nosniff"] = headers.get("x-content-type-options") == "nosniff"
        status, _, _ = _try(
            lambda: _request(port, "POST", "/v2/models/ident/infer", doc, [("k", "v"), ("k", "v")])
        )
        results["repeated header accepted"] = status == 200
        status, _, _ = _try(
            lambda: _request(port, "POST", "/v2/models/ident/infer", doc, [("k", "x"), ("k", "v")])
        )
        results["first value counts"] = status == 403
        channel = grpc.insecure_channel(f"127.0.0.1:{victim.grpc_port}")
        stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
        key = "triton-grpc-protocol-k"
        try:
            stub.ServerLive(service_pb2.ServerLiveRequest(), metadata=[(key, "v"), (key, "x")], timeout=30)
            results["gRPC metadata: first value counts"] = True
        except grpc.RpcError:
            results["gRPC metadata: first value counts"] = False
        channel.close()
    finally:
        victim.stop()
    got = "; ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in results.items())
    return got, all(results.values()), "restricted inference (HTTP) and health (gRPC)"


CASES: dict[str, tuple[str, str, str, Callable[[Server, Any], tuple[str, bool, str]]]] = {
    # name: (what, expected, which limit the RSS goal uses, function)
    "override_names": (
        f"repository loads with file overrides under {len(NAMES)} hostile model names ('..', 'x/../../y', NUL, ...), "
        "HTTP and gRPC, a good and a failing model, each unloaded",
        "0 files written or removed outside the server's temporary folder; no override folder left",
        "body",
        override_names,
    ),
    "openai_prompts": (
        "100,000 prompts in one /v1/completions body",
        "400 naming --openai-max-prompts at once; RSS flat",
        "body",
        openai_prompts,
    ),
    "status_page_access": (
        "GET / and /v2/status on the metrics port of a server restricting the statistics APIs",
        "403 without the restriction header, 200 with it; /metrics open",
        "body",
        status_page_access,
    ),
    "wire_edges": (
        "absolute-form target, nosniff, repeated restriction header, repeated gRPC metadata",
        "as the reference (served; first values count) and nosniff on answers",
        "body",
        wire_edges,
    ),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="issue 25's name, size and access cases, alone")
    p.add_argument("cases", nargs="*", default=list(CASES), help=f"cases (default all: {', '.join(CASES)})")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="inferd-safety-"))
    server = Server(_identity_repo(work), work / "server.log").start()
    ok = True
    try:
        for name in args.cases:
            what, expected, _limit, func = CASES[name]
            got, good, note = func(server, None)
            ok &= good
            print(
                f"{name}: {'ok' if good else 'MISS'}\n  what: {what}\n  expected: {expected}\n  got: {got}\n  ({note})"
            )
    finally:
        server.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
