"""Two model repositories for ``--model-namespacing`` (the layouts of Triton's L0_model_namespacing).

``addsub_repo`` and ``subadd_repo`` each hold Python models over INPUT0/INPUT1 (INT32 [16]) that
answer OUTPUT0/OUTPUT1: an "addsub" model answers (sum, difference), a "subadd" one (difference,
sum); an ensemble of one step passes a request through to a model the step names. The cases:

- ``no_duplication``: every name in one repository (``simple_addsub`` -> ``composing_addsub``,
  ``simple_subadd`` -> ``composing_subadd``);
- ``duplication``: both ensembles step on ``composing_model``, which each repository holds (its own
  kind in each): each ensemble must use its own repository's;
- ``ensemble_duplication``: both repositories hold an ensemble ``simple_ensemble`` stepping on
  their own ``composing_addsub`` / ``composing_subadd``.

Written by the tests (tests/e2e/test_e2e_model_namespacing.py) and by the reference's recorder
(tests/fixtures/make_reference_namespacing.py), so that both servers serve the same files.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

CASES = ("no_duplication", "duplication", "ensemble_duplication")
REPOSITORIES = ("addsub_repo", "subadd_repo")

_TENSORS = "\n".join(
    f'{kind} [{{ name: "{name}" data_type: TYPE_INT32 dims: [ 16 ] }}]'
    for kind, name in (("input", "INPUT0"), ("input", "INPUT1"), ("output", "OUTPUT0"), ("output", "OUTPUT1"))
)

_MODEL_PY = """import numpy as np
import triton_python_backend_utils as pb_utils

SWAP = {swap}


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            first, second = (a - b, a + b) if SWAP else (a + b, a - b)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", first.astype(np.int32)),
                pb_utils.Tensor("OUTPUT1", second.astype(np.int32)),
            ]))
        return responses
"""


def _python_model(folder: Path, name: str, swap: bool) -> None:
    (folder / name / "1").mkdir(parents=True)
    (folder / name / "config.pbtxt").write_text(f'name: "{name}"\nbackend: "python"\n{_TENSORS}\n')
    (folder / name / "1" / "model.py").write_text(_MODEL_PY.format(swap=swap))


def _ensemble(folder: Path, name: str, step: str) -> None:
    (folder / name / "1").mkdir(parents=True)
    maps = "".join(f' input_map {{ key: "{t}" value: "{t}" }}' for t in ("INPUT0", "INPUT1")) + "".join(
        f' output_map {{ key: "{t}" value: "{t}" }}' for t in ("OUTPUT0", "OUTPUT1")
    )
    (folder / name / "config.pbtxt").write_text(
        f'name: "{name}"\nplatform: "ensemble"\n{_TENSORS}\n'
        f'ensemble_scheduling {{ step [ {{ model_name: "{step}" model_version: -1{maps} }} ] }}\n'
    )


def write_case(root: Path, case: str) -> tuple[Path, Path]:
    """The two repositories of ``case`` under ``root`` (which must not hold them yet)."""
    addsub, subadd = (root / r for r in REPOSITORIES)
    if case == "no_duplication":
        _python_model(addsub, "composing_addsub", swap=False)
        _ensemble(addsub, "simple_addsub", "composing_addsub")
        _python_model(subadd, "composing_subadd", swap=True)
        _ensemble(subadd, "simple_subadd", "composing_subadd")
    elif case == "duplication":
        _python_model(addsub, "composing_model", swap=False)
        _ensemble(addsub, "simple_addsub", "composing_model")
        _python_model(subadd, "composing_model", swap=True)
        _ensemble(subadd, "simple_subadd", "composing_model")
    elif case == "ensemble_duplication":
        _python_model(addsub, "composing_addsub", swap=False)
        _ensemble(addsub, "simple_ensemble", "composing_addsub")
        _python_model(subadd, "composing_subadd", swap=True)
        _ensemble(subadd, "simple_ensemble", "composing_subadd")
    else:
        raise ValueError(f"no case {case!r}: {CASES}")
    return addsub, subadd


# -- the probe: what a server answers on a case's repositories ------------------------------------
#: the names each case's requests go to (an ambiguous one included, and one no repository holds)
NAMES = {
    "no_duplication": ("simple_addsub", "composing_addsub", "simple_subadd", "composing_subadd", "nope"),
    "duplication": ("simple_addsub", "simple_subadd", "composing_model", "nope"),
    "ensemble_duplication": ("composing_addsub", "composing_subadd", "simple_ensemble", "nope"),
}
#: what explicit mode loads (an ensemble loads its steps)
LOADS = {
    "no_duplication": ("simple_addsub", "simple_subadd"),
    "duplication": ("simple_addsub", "simple_subadd"),
    "ensemble_duplication": ("simple_ensemble",),
}
#: the name two repositories hold, per case
AMBIGUOUS = {"duplication": "composing_model", "ensemble_duplication": "simple_ensemble"}


def _http(port: int, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method=method)
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    return status, json.loads(raw) if raw else None


def kind_of(outputs: dict[str, list[int]]) -> str:
    """ "addsub" / "subadd" from the outputs of INPUT0 = INPUT1 = 0..15."""
    twice = [2 * i for i in range(16)]
    if outputs.get("OUTPUT0") == twice and outputs.get("OUTPUT1") == [0] * 16:
        return "addsub"
    if outputs.get("OUTPUT1") == twice and outputs.get("OUTPUT0") == [0] * 16:
        return "subadd"
    return f"unexpected: {outputs}"


def infer_http(port: int, name: str) -> Any:
    """One JSON inference of ``name``: the kind of answer, or [status, error text]."""
    data = list(range(16))
    body = {
        "inputs": [
            {"name": n, "datatype": "INT32", "shape": [16], "data": data} for n in ("INPUT0", "INPUT1")
        ]
    }
    status, answer = _http(port, "POST", f"/v2/models/{name}/infer", json.dumps(body).encode())
    if status != 200:
        return [status, (answer or {}).get("error")]
    return kind_of({o["name"]: o["data"] for o in answer["outputs"]})


def infer_grpc(port: int, name: str) -> Any:
    """The same over gRPC with tritonclient: the kind, or [status code name, details]."""
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{port}")
    inputs = [grpcclient.InferInput(n, [16], "INT32") for n in ("INPUT0", "INPUT1")]
    for i in inputs:
        i.set_data_from_numpy(np.arange(16, dtype=np.int32))
    try:
        result = client.infer(name, inputs)
    except InferenceServerException as e:
        return [e.status(), e.message()]
    finally:
        client.close()
    return kind_of({n: result.as_numpy(n).tolist() for n in ("OUTPUT0", "OUTPUT1")})


def index(port: int) -> list[list[str]]:
    """The repository index as sorted [name, version, state, reason] rows."""
    _, rows = _http(port, "POST", "/v2/repository/index", b"{}")
    return sorted([r["name"], r.get("version", ""), r.get("state", ""), r.get("reason", "")] for r in rows)


def answers(http_port: int, grpc_port: int, case: str) -> dict[str, Any]:
    """What the server answers now for every name of ``case``, and for its ambiguous name on the
    model endpoints."""
    out: dict[str, Any] = {
        "ready": _http(http_port, "GET", "/v2/health/ready")[0],
        "index": index(http_port),
        "http": {n: infer_http(http_port, n) for n in NAMES[case]},
        "grpc": {n: infer_grpc(grpc_port, n) for n in NAMES[case]},
    }
    name = AMBIGUOUS.get(case)
    if name is not None:
        out["endpoints"] = {
            path: list(_http(http_port, "GET", path.format(name=name)))
            for path in (
                "/v2/models/{name}",
                "/v2/models/{name}/ready",
                "/v2/models/{name}/config",
                "/v2/models/{name}/versions/1/ready",
            )
        }
        status, stats = _http(http_port, "GET", f"/v2/models/{name}/stats")
        out["stats"] = [status, sorted(s["name"] for s in stats["model_stats"]) if status == 200 else stats]
    return out


def success_lines(metrics_port: int, root: Path) -> list[str]:
    """The ``nv_inference_request_success`` series, the repositories' paths as ``<root>``, sorted."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=30) as r:
        text = r.read().decode()
    lines = [line for line in text.splitlines() if line.startswith("nv_inference_request_success{")]
    return sorted(line.replace(str(root), "<root>") for line in lines)


def _settled_index(port: int) -> list[list[str]]:
    """The index once no model is UNLOADING any more (the reference unloads after it answers)."""
    from waiting import wait_until

    def settled() -> list[list[str]] | None:
        rows = index(port)
        return rows if all(r[2] != "UNLOADING" for r in rows) else None

    return wait_until(settled, "no model UNLOADING")


def _loaded(port: int) -> None:
    """Wait until poll mode's first look loaded the four models (the reference answers ready
    while it still loads them)."""
    from waiting import wait_until

    wait_until(lambda: [r[2] for r in index(port)] == ["READY"] * 4, "the four models READY", 60)


def scenario(ports: tuple[int, int, int], root: Path, case: str, mode: str) -> dict[str, Any]:
    """What the server answers on ``case``'s repositories (under ``root``) in ``mode`` (poll or
    explicit), from its start: explicit mode's loads and the ambiguous name's unload and load."""
    http, grpc, metrics = ports
    out: dict[str, Any] = {}
    name = AMBIGUOUS.get(case)
    if mode == "explicit":
        if name is not None:
            out["before_load"] = [infer_http(http, name), infer_grpc(grpc, name)]
        out["loads"] = {n: _http(http, "POST", f"/v2/repository/models/{n}/load", b"{}") for n in LOADS[case]}
    else:
        _loaded(http)
    out["now"] = answers(http, grpc, case)
    out["metrics"] = success_lines(metrics, root)
    if mode == "explicit" and name is not None:
        out["unload"] = _http(http, "POST", f"/v2/repository/models/{name}/unload", b"{}")
        out["index_after_unload"] = _settled_index(http)
        out["after_unload"] = [infer_http(http, name), infer_grpc(grpc, name)]
        out["load"] = _http(http, "POST", f"/v2/repository/models/{name}/load", b"{}")
        out["after_load"] = {n: infer_http(http, n) for n in NAMES[case]}
    return out


def dynamic(
    ports: tuple[int, int, int], root: Path, mode: str, settle: Callable[[], None] | None = None
) -> dict[str, Any]:
    """The duplication case's addsub ``composing_model`` taken out of its repository and put back
    (L0_model_namespacing test_dynamic_resolution, in its order): the ensembles follow it. Poll
    mode waits for the server to notice; explicit mode loads the ensembles once it is away, and
    ``simple_addsub`` again once it is back."""
    from waiting import wait_until

    http, _, _ = ports
    inside, outside = root / "addsub_repo" / "composing_model", root / "composing_model"
    out: dict[str, Any] = {}
    names = ("simple_subadd", "simple_addsub", "composing_model")

    def load(*models: str) -> None:
        for m in models:
            out.setdefault("loads", []).append(
                [m, _http(http, "POST", f"/v2/repository/models/{m}/load", b"{}")]
            )

    if mode == "poll":
        _loaded(http)
    if settle is not None:  # the reference's first poll loads its models again: not in the middle
        settle()
    inside.rename(outside)
    if mode == "explicit":
        load("simple_addsub", "simple_subadd")
    else:
        wait_until(lambda: infer_http(http, "simple_addsub") == "subadd", "simple_addsub to follow", 60)
    out["away"] = {n: infer_http(http, n) for n in names}
    out["index_away"] = _settled_index(http)
    outside.rename(inside)
    if mode == "explicit":
        load("simple_addsub")
    else:
        wait_until(lambda: infer_http(http, "simple_addsub") == "addsub", "simple_addsub back", 60)
    out["back"] = {n: infer_http(http, n) for n in names}
    out["index_back"] = _settled_index(http)
    return out
