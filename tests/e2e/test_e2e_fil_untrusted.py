"""Tree model files are untrusted input (issue 42): the four hostile files a probe found, each made
here from a model trained here and uploaded to a real server through a repository load with file
overrides (tritonclient's ``load_model(config=..., files=...)``), are refused with a 400 that names the
file and what is wrong, at once and with the server's memory flat, while another model serves on.
Before the checks (``backends/fil/check_*.py``) the first loaded and its first one-row inference
ended the server (exit 139), the second served and then ended it, the third grew the server to 12.8 GB
in 9 minutes, the fourth never finished loading. Legitimate uploads of every model_type still load and
answer as their framework does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess, serving
from tritonclient.utils import InferenceServerException

import fil_models as fm

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    repo = tmp_path_factory.mktemp("fil-untrusted") / "models"
    booster = fm.xgboost("cancer", "binary:logistic")
    fm.write(
        repo, "other", booster, "xgboost_json", fm.config("other", "xgboost_json", 30, 1, output_class=False)
    )
    log = tmp_path_factory.mktemp("log") / "inferd-fil-untrusted.log"
    with serving(repo, log, "--model-control-mode=explicit", "--load-model=other") as proc:
        # the repository model's XGBoost engine loads in a thread of its own (engine.py), which grows the
        # server by about 90 MiB: done before a test measures the server's memory across an upload
        assert proc.wait_starting(lambda: "model 'other': XGBoost's engine loaded" in proc.log())
        yield proc


@pytest.fixture(scope="module")
def client(server: InferdProcess) -> Iterator[httpclient.InferenceServerClient]:
    c = httpclient.InferenceServerClient(server.url, network_timeout=120)
    yield c
    c.close()


def _rss(server: InferdProcess) -> int:
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmRSS:")).split()[1]) * 1024


def _other_serves(client: Any) -> None:
    """The repository's model answers as XGBoost does: the server kept serving."""
    x, _ = fm.dataset("cancer")
    inp = httpclient.InferInput("input__0", [4, 30], "FP32")
    inp.set_data_from_numpy(x[:4])
    got = client.infer("other", [inp]).as_numpy("output__0")
    assert got is not None and got.shape == (4,)


# (upload name, model_type, features, width, the bad file, what the refusal says)
CASES: list[tuple[str, str, int, int, Callable[[], bytes], str]] = [
    (
        "split_feature",
        "xgboost_json",
        30,
        1,
        lambda: fm.bad_split_feature(fm.xgboost("cancer", "binary:logistic", trees=3)),
        "tree 0: node 0 splits on feature 1000000, but the model reads 30 feature(s)",
    ),
    (
        "checkpoint_field",
        "treelite_checkpoint",
        4,
        3,
        lambda: fm.bad_checkpoint_field(fm.sklearn_forest("iris", trees=3)),
        "range [0, 1099511627776) is outside the tree's",
    ),
    (
        "num_leaves",
        "lightgbm",
        10,
        1,
        lambda: fm.huge_num_leaves(fm.lightgbm("diabetes", "regression", trees=2, num_leaves=4)),
        "tree 0: leaf_value has 4 entries for 1000000000",
    ),
    (
        "cycle",
        "lightgbm",
        10,
        1,
        lambda: fm.tree_cycle(fm.lightgbm("diabetes", "regression", trees=2, num_leaves=4)),
        "tree 0: node 0 (the root) is the child of another node: a cycle",
    ),
]


@pytest.mark.parametrize(
    ("name", "model_type", "features", "width", "build", "what"), CASES, ids=[c[0] for c in CASES]
)
def test_a_hostile_upload_is_refused_and_the_server_serves_on(
    server: InferdProcess,
    client: Any,
    name: str,
    model_type: str,
    features: int,
    width: int,
    build: Callable[[], bytes],
    what: str,
) -> None:
    data = build()
    file = fm.FILES[model_type]
    rss = _rss(server)
    with pytest.raises(InferenceServerException) as e:
        client.load_model(
            name, config=fm.config_json(name, model_type, features, width), files={f"file:1/{file}": data}
        )
    assert e.value.status() == "400"
    message = e.value.message()
    # Triton's load error, the reason as the reference's for a file Treelite cannot read (UNKNOWN)
    assert message.startswith(
        f"load failed for model '{name}': version 1 is at UNAVAILABLE state: Unknown: failed to load '"
    )
    assert f"/1/{file}' as model_type '{model_type}': " in message  # the file, named
    assert what in message, message
    assert _rss(server) - rss < 64 << 20  # nothing native read it: the memory is flat
    assert server.proc is not None and server.proc.poll() is None
    assert not client.is_model_ready(name)
    _other_serves(client)


def test_the_refusal_comes_over_grpc_too(server: InferdProcess) -> None:
    data = fm.tree_cycle(fm.lightgbm("diabetes", "regression", trees=2, num_leaves=4))
    c = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        with pytest.raises(InferenceServerException) as e:
            c.load_model(
                "cycle_grpc",
                config=fm.config_json("cycle_grpc", "lightgbm", 10, 1),
                files={"file:1/model.txt": data},
            )
        assert e.value.status() == "StatusCode.INVALID_ARGUMENT"
        assert "a cycle" in e.value.message()
    finally:
        c.close()


def _save(model: Any, model_type: str, tmp_path: Path) -> bytes:
    path = tmp_path / fm.FILES[model_type]
    fm.save(model, model_type, path)
    return path.read_bytes()


LEGIT: list[tuple[str, str, Callable[[], Any], int, int]] = [
    ("xgboost", "cancer", lambda: fm.xgboost("cancer", "binary:logistic"), 30, 1),
    ("xgboost_json", "iris", lambda: fm.xgboost("iris", "multi:softprob"), 4, 3),
    ("xgboost_ubj", "diabetes", lambda: fm.xgboost("diabetes", "reg:squarederror"), 10, 1),
    ("lightgbm", "iris", lambda: fm.lightgbm("iris", "multiclass"), 4, 3),
    ("treelite_checkpoint", "iris", lambda: fm.sklearn_forest("iris"), 4, 3),
]


@pytest.mark.parametrize(
    ("model_type", "data", "train", "features", "width"), LEGIT, ids=[c[0] for c in LEGIT]
)
def test_a_legitimate_upload_of_every_model_type_loads_and_answers(
    client: Any,
    tmp_path: Path,
    model_type: str,
    data: str,
    train: Callable[[], Any],
    features: int,
    width: int,
) -> None:
    model = train()
    name = f"legit_{model_type}"
    client.load_model(
        name,
        config=fm.config_json(name, model_type, features, width),
        files={f"file:1/{fm.FILES[model_type]}": _save(model, model_type, tmp_path)},
    )
    try:
        x, _ = fm.dataset(data)
        inp = httpclient.InferInput("input__0", [16, features], "FP32")
        inp.set_data_from_numpy(x[:16])
        got = client.infer(name, [inp]).as_numpy("output__0")
        if model_type == "treelite_checkpoint":
            want = model.predict_proba(x[:16])
        elif model_type == "lightgbm":
            want = model.predict(x[:16])
        else:
            import xgboost as xgb

            want = model.predict(xgb.DMatrix(x[:16]))
        np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-3, atol=1e-2)
    finally:
        client.unload_model(name)
