"""The example repository (examples/build_models.py) built into a tmp dir, served by `inferd serve`.

tiny_mlp (no config.pbtxt: auto-completed from the graph), densenet_onnx (the Triton quickstart
model, with reshape and a labels file) and digits_onnx (a scikit-learn classifier trained on the
bundled digits dataset, exported by skl2onnx) driven by tritonclient.http with binary tensors.
What ONNX Runtime does as every native backend does (metadata, HTTP and gRPC, batching, bad inputs) is
tested in test_e2e_native_backends.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import tritonclient.http as httpclient
from conftest import REPO_ROOT, InferdProcess, http_client, serving

from native_backends import http_input
from repo_paths import load_script

pytestmark = pytest.mark.timeout(120)


def _build_models() -> ModuleType:
    return load_script(REPO_ROOT / "examples" / "build_models.py", "inferd_example_build")


build_models = _build_models()


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("examples") / "models"
    names = build_models.build(repo)
    assert {"tiny_mlp", "densenet_onnx", "digits_onnx", "add_sub"} <= set(names)
    return repo


@pytest.fixture(scope="module")
def onnx_server(examples: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    with serving(examples, tmp_path_factory.mktemp("log") / "inferd-onnx.log") as proc:
        yield proc


@pytest.fixture(scope="module")
def client(onnx_server: InferdProcess) -> Iterator[httpclient.InferenceServerClient]:
    with http_client(onnx_server) as c:
        yield c


def test_every_example_model_is_ready(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_ready()
    for name in (
        "tiny_mlp",
        "densenet_onnx",
        "digits_onnx",
        "add_sub",
        "identity_bytes",
        "softmax_classifier",
    ):
        assert client.is_model_ready(name), name


def test_tiny_mlp_config_is_completed_from_the_graph(client: httpclient.InferenceServerClient) -> None:
    cfg = client.get_model_config("tiny_mlp")
    assert cfg["platform"] == "onnxruntime_onnx" and cfg["backend"] == "onnxruntime"
    assert cfg["max_batch_size"] == 4
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [4]
    assert [(i["name"], i["data_type"], i["dims"]) for i in cfg["input"]] == [("INPUT0", "TYPE_FP32", [4])]
    assert [(o["name"], o["dims"]) for o in cfg["output"]] == [("OUTPUT0", [3])]
    assert cfg["instance_group"][0]["count"] == 2
    meta = client.get_model_metadata("tiny_mlp")
    assert meta["inputs"] == [{"name": "INPUT0", "datatype": "FP32", "shape": [-1, 4]}]


def test_tiny_mlp_answers_what_the_graph_computes(client: httpclient.InferenceServerClient) -> None:
    x = np.random.default_rng(7).random((3, 4), dtype=np.float32)
    result = client.infer("tiny_mlp", [http_input("INPUT0", x)])
    y = result.as_numpy("OUTPUT0")
    assert y.shape == (3, 3)
    np.testing.assert_allclose(
        y, build_models.family("onnx_models").tiny_mlp_reference(x), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)


def _image() -> np.ndarray[Any, Any]:
    return np.random.default_rng(3).random((3, 224, 224), dtype=np.float32)


def _densenet_bare(examples: Path, image: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    session = ort.InferenceSession(str(examples / "densenet_onnx" / "1" / "model.onnx"))
    out: np.ndarray[Any, Any] = session.run(["fc6_1"], {"data_0": image.reshape(1, 3, 224, 224)})[0]
    return out.reshape(1000)


def test_densenet_metadata_follows_the_quickstart(client: httpclient.InferenceServerClient) -> None:
    meta = client.get_model_metadata("densenet_onnx")
    assert meta["inputs"] == [{"name": "data_0", "datatype": "FP32", "shape": [3, 224, 224]}]
    assert meta["outputs"] == [{"name": "fc6_1", "datatype": "FP32", "shape": [1000]}]
    cfg = client.get_model_config("densenet_onnx")
    assert cfg["max_batch_size"] == 0
    assert cfg["input"][0]["reshape"] == {"shape": [1, 3, 224, 224]}
    assert cfg["output"][0]["label_filename"] == "densenet_labels.txt"


def test_densenet_scores_match_bare_onnxruntime(
    client: httpclient.InferenceServerClient, examples: Path
) -> None:
    image = _image()
    scores = client.infer("densenet_onnx", [http_input("data_0", image)]).as_numpy("fc6_1")
    assert scores.shape == (1000,)
    np.testing.assert_allclose(scores, _densenet_bare(examples, image), rtol=1e-3, atol=1e-4)


def test_densenet_classification(client: httpclient.InferenceServerClient, examples: Path) -> None:
    image = _image()
    out = httpclient.InferRequestedOutput("fc6_1", binary_data=False, class_count=3)
    result = client.infer("densenet_onnx", [http_input("data_0", image)], outputs=[out])
    top = [str(v) for v in result.as_numpy("fc6_1")]
    assert len(top) == 3
    expected = _densenet_bare(examples, image)
    best = int(np.argmax(expected))
    score, index, label = top[0].split(":")
    assert (int(index), label) == (best, f"class_{best:03d}")
    assert float(score) == pytest.approx(float(expected[best]), rel=1e-3, abs=1e-4)
    values = [float(t.split(":")[0]) for t in top]
    assert values == sorted(values, reverse=True)


# -- digits_onnx: scikit-learn's digits, a real classifier -------------------------------------------


@pytest.fixture(scope="module")
def digits() -> tuple[Any, np.ndarray[Any, Any]]:
    """The classifier digits_onnx was exported from (trained again: the same, deterministically) and
    held-out images it never saw."""
    _, x_test, _, _ = build_models.family("digits").digits_data()
    return build_models.family("digits").digits_classifier(), x_test


def test_digits_config_batches_and_labels(client: httpclient.InferenceServerClient) -> None:
    cfg = client.get_model_config("digits_onnx")
    assert cfg["platform"] == "onnxruntime_onnx" and cfg["max_batch_size"] == 16
    assert cfg["dynamic_batching"]["preferred_batch_size"] == [16]
    assert [(o["name"], o["data_type"], o["label_filename"]) for o in cfg["output"]] == [
        ("label", "TYPE_INT64", ""),
        ("probabilities", "TYPE_FP32", "digits_labels.txt"),
    ]
    meta = client.get_model_metadata("digits_onnx")
    assert meta["inputs"] == [{"name": "pixels", "datatype": "FP32", "shape": [-1, 64]}]
    assert meta["outputs"] == [
        {"name": "label", "datatype": "INT64", "shape": [-1, 1]},
        {"name": "probabilities", "datatype": "FP32", "shape": [-1, 10]},
    ]


def test_digits_top_class_matches_sklearn(
    client: httpclient.InferenceServerClient, digits: tuple[Any, np.ndarray[Any, Any]]
) -> None:
    clf, x_test = digits
    images = x_test[:12]
    result = client.infer("digits_onnx", [http_input("pixels", images)])
    probs = result.as_numpy("probabilities")
    assert probs.shape == (12, 10)
    expected = clf.predict(images)
    np.testing.assert_array_equal(probs.argmax(axis=1), expected)
    np.testing.assert_array_equal(result.as_numpy("label").reshape(12), expected)
    np.testing.assert_allclose(probs, clf.predict_proba(images), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(probs.sum(axis=1), 1.0, rtol=1e-5)


def test_digits_single_images_batched_concurrently(
    client: httpclient.InferenceServerClient, digits: tuple[Any, np.ndarray[Any, Any]]
) -> None:
    clf, x_test = digits
    images = x_test[12:36]
    pending = [
        client.async_infer("digits_onnx", [http_input("pixels", images[i : i + 1])]) for i in range(24)
    ]
    got = [int(p.get_result().as_numpy("probabilities").argmax()) for p in pending]
    assert got == clf.predict(images).tolist()


def test_digits_classification_with_labels(
    client: httpclient.InferenceServerClient, digits: tuple[Any, np.ndarray[Any, Any]]
) -> None:
    clf, x_test = digits
    images = x_test[36:40]
    out = httpclient.InferRequestedOutput("probabilities", binary_data=False, class_count=3)
    result = client.infer("digits_onnx", [http_input("pixels", images)], outputs=[out])
    top = result.as_numpy("probabilities")
    assert top.shape == (4, 3)
    proba = clf.predict_proba(images)
    for row, want, p in zip(top, clf.predict(images), proba, strict=True):
        score, index, label = str(row[0]).split(":")
        assert (int(index), label) == (int(want), f"digit_{want}")
        assert float(score) == pytest.approx(float(p[want]), abs=2e-6)
        values = [float(str(t).split(":")[0]) for t in row]
        assert values == sorted(values, reverse=True)
        assert [int(str(t).split(":")[1]) for t in row] == np.argsort(-p, kind="stable")[:3].tolist()


def test_the_builder_never_writes_into_a_repository_it_did_not_write(tmp_path: Path) -> None:
    """``make run MODELS=<your repository>`` once replaced a user's ``densenet_onnx`` (and added 13
    models beside it): a folder holding anything this build did not write is refused, untouched."""
    users = tmp_path / "users"
    (users / "densenet_onnx" / "1").mkdir(parents=True)
    (users / "densenet_onnx" / "1" / "model.onnx").write_bytes(b"the user's own model")
    with pytest.raises(
        SystemExit, match=r"holds densenet_onnx, which this build did not write.*inferd serve"
    ):
        build_models.build(users, {"add_sub"})
    assert sorted(p.name for p in users.iterdir()) == ["densenet_onnx"]
    assert (users / "densenet_onnx" / "1" / "model.onnx").read_bytes() == b"the user's own model"
    ours = tmp_path / "ours"
    assert build_models.build(ours, {"add_sub"}) == ["add_sub"]
    assert build_models.build(ours, {"add_sub"}) == ["add_sub"]  # a folder it wrote: built again at will


@pytest.mark.filterwarnings("ignore::FutureWarning")  # torch's own deprecations inside its exporter
@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_model_exported_from_pytorch_in_this_venv_serves(tmp_path: Path) -> None:
    """The venv ``make run`` builds exports with ``torch.onnx.export``'s default exporter (it needs
    onnxscript, in the examples extra), and inferd serves what it wrote: the same numbers as torch."""
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh()).eval()
    repo = tmp_path / "repository"
    (repo / "exported" / "1").mkdir(parents=True)
    torch.onnx.export(
        net,
        (torch.randn(2, 4),),
        str(repo / "exported" / "1" / "model.onnx"),
        input_names=["INPUT0"],
        output_names=["OUTPUT0"],
        dynamic_shapes=({0: torch.export.Dim("batch", max=64)},),
    )
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)  # auto-complete: batches up to 4
    with torch.no_grad():
        want = net(torch.from_numpy(x)).numpy()
    with serving(repo, tmp_path / "server.log") as proc, http_client(proc) as c:
        got = c.infer("exported", [http_input("INPUT0", x)]).as_numpy("OUTPUT0")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
