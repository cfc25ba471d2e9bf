"""The same C/C++ backend libraries under inferd and under the real Triton 2.51
(reference_observed_c_backends.json, tests/fixtures/make_reference_c_backends.py): the same load states
and reasons, answers, statistics and streams; where the reference crashed or never answered, inferd
answers with an error and serves on."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from conftest import InferdProcess

import c_backends
from repo_paths import FIXTURES, load_script

pytestmark = pytest.mark.timeout(300)

DOC = json.loads((FIXTURES / "reference_observed_c_backends.json").read_text())
#: the recorder: the probes both sides are sent
recorder = load_script(FIXTURES / "make_reference_c_backends.py", "make_reference_c_backends")

#: reasons inferd words on purpose differently (the reference's misleads: "No such file or directory"
#: for a library built for another machine, "file too short" for a text file; a backend found nowhere:
#: the reference's words, then where inferd looked)
OWN_WORDS = {
    "c_not_elf": "is not a shared library (no ELF header)",
    "c_wrong_arch": "is a shared library for aarch64, not for this machine",
    "c_nowhere": DOC["index"]["c_nowhere"]["reason"].removesuffix(".") + ". inferd's backends are",
}
#: probes where the reference crashed (a response sent after the final one, an exception out of
#: execute) or never answered (a request released without a response): inferd's answers
BETTER = {
    "throw": (
        500,
        "TRITONBACKEND_ModelInstanceExecute threw an exception: throwing: out of range in the model",
    ),
    "no_final": (500, "the backend released the request without sending its final response"),
    "late_send": (200, None),
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    root = tmp_path_factory.mktemp("c_backends_reference")
    repo, backends = c_backends.repository(root)
    proc = InferdProcess(
        repo,
        root / "inferd.log",
        ("--backend-directory", str(backends), "--strict-readiness=false"),
        env=c_backends.server_env(),
    ).start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, proc.log()[-4000:]


def _path_free(text: str) -> str:
    """A reason with a model's files named from the repository's root, as inferd names them (never with
    the server's paths: README), whatever folder the recording ran in."""
    import re

    return re.sub(r"/tmp/[^ :]*/models/", "", text)


def test_load_states_and_reasons_are_the_references(server: InferdProcess) -> None:
    r = server.request("POST", "/v2/repository/index", {})
    got = {m["name"]: {"state": m["state"], "reason": m.get("reason", "")} for m in r.json()}
    assert set(got) == set(DOC["index"])
    for name, want in DOC["index"].items():
        assert got[name]["state"] == want["state"], name
        if name in OWN_WORDS:
            assert OWN_WORDS[name] in got[name]["reason"], got[name]
        else:
            assert _path_free(got[name]["reason"]) == _path_free(want["reason"]), name


@pytest.mark.parametrize(("name", "model", "body"), recorder.PROBES, ids=[p[0] for p in recorder.PROBES])
def test_answers_are_the_references(
    server: InferdProcess, name: str, model: str, body: dict[str, Any]
) -> None:
    want = DOC["answers"][name]
    r = server.infer(model, body)
    if name in BETTER:
        assert want.get("crashed") or want.get("timeout"), want  # what the reference did
        status, text = BETTER[name]
        assert r.status == status, r.body
        if text is not None:
            assert text in r.error
        live = server.request("GET", "/v2/health/live")
        assert live.status == 200
        return
    assert r.status == want["status"], r.body
    assert r.json() == want["body"]


def test_statistics_are_the_references(server: InferdProcess) -> None:
    probe = next(p for p in recorder.PROBES if p[0] == "reshape")
    before = server.request("GET", "/v2/models/c_identity_reshape/stats").json()["model_stats"][0]
    for _ in range(3):
        assert server.infer("c_identity_reshape", probe[2]).status == 200
    after = c_backends.settled_stats(
        server, "c_identity_reshape", before["inference_stats"]["success"]["count"] + 3
    )
    want = DOC["statistics"]["model_stats"][0]

    def counts(s: dict[str, Any]) -> dict[str, Any]:
        return {
            "inference_count": s["inference_count"],
            "execution_count": s["execution_count"],
            **{k: v["count"] for k, v in s["inference_stats"].items()},
            "batch": {b["batch_size"]: b["compute_infer"]["count"] for b in s["batch_stats"]},
        }

    delta = {
        k: v - counts(before).get(k, 0) if not isinstance(v, dict) else v for k, v in counts(after).items()
    }
    delta["batch"] = {b: n - counts(before)["batch"].get(b, 0) for b, n in counts(after)["batch"].items()}
    assert delta == counts(want)


def test_streams_are_the_references(server: InferdProcess) -> None:
    import tritonclient.grpc as grpcclient

    for key, values in (("three", [5, 6, 7]), ("none", [])):
        got: queue.Queue[Any] = queue.Queue()
        c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        c.start_stream(callback=lambda result, error, got=got: got.put((result, error)))
        i = grpcclient.InferInput("IN", [len(values)], "INT32")
        i.set_data_from_numpy(np.array(values, dtype=np.int32))
        c.async_stream_infer("c_repeat", [i], enable_empty_final_response=True)
        out: list[Any] = []
        while not out or not out[-1]["final"]:
            result, error = got.get(timeout=30)
            assert error is None
            resp = result.get_response()
            out.append(
                {
                    "final": resp.parameters["triton_final_response"].bool_param,
                    "outputs": {o.name: result.as_numpy(o.name).tolist() for o in resp.outputs},
                }
            )
        c.stop_stream()
        c.close()
        assert out == DOC["stream"][key]


def test_a_sequence_is_the_references(server: InferdProcess) -> None:
    got = [server.infer("c_sequence", body) for body in recorder.SEQUENCE]
    assert [{"status": r.status, "body": r.json()} for r in got] == DOC["sequence"]


def test_implicit_state_is_the_references(server: InferdProcess) -> None:
    got = [server.infer("c_accumulate", body) for body in recorder.STATE]
    assert [{"status": r.status, "body": r.json()} for r in got] == DOC["state"]


def test_the_completed_config_is_the_references(server: InferdProcess) -> None:
    got = server.request("GET", "/v2/models/c_autofill/config").json()
    assert got == DOC["config"]
