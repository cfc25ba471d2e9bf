"""The fil backend under `inferd serve`: the example tree models (examples/trees.py) and the FIL
backend's other model types, driven by tritonclient over HTTP and gRPC; dynamic batching; a corrupt
model file and a model_type that does not match its file failing their load while the others serve.

The reference installed here has no FIL backend: the texts checked are inferd's and Treelite's (the
FIL backend loads every model through Treelite; see tests/unit/backends/test_fil_backend.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import lightgbm as lgb
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import xgboost as xgb
from conftest import REPO_ROOT, InferdProcess, grpc_client, http_client, serving
from tritonclient.utils import InferenceServerException

import fil_models as fm
from repo_paths import load_script

pytestmark = pytest.mark.timeout(180)


def _build_models() -> ModuleType:
    return load_script(REPO_ROOT / "examples" / "build_models.py", "inferd_example_build_fil")


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("fil") / "models"
    names = _build_models().build(repo, {"breast_cancer_xgboost", "diabetes_lightgbm"})
    assert names == ["breast_cancer_xgboost", "diabetes_lightgbm"]
    # the same classifier, batched with a queue delay so that concurrent requests share executes
    batched = repo / "batched_xgboost"
    (batched / "1").mkdir(parents=True)
    (batched / "1" / "xgboost.json").write_bytes((repo / "breast_cancer_xgboost/1/xgboost.json").read_bytes())
    config = (repo / "breast_cancer_xgboost/config.pbtxt").read_text()
    delayed = "dynamic_batching { max_queue_delay_microseconds: 300000 }"
    (batched / "config.pbtxt").write_text(config.replace("dynamic_batching { }", delayed))
    # the FIL backend's other formats: XGBoost's legacy binary, a scikit-learn forest's checkpoint
    booster = fm.xgboost("cancer", "binary:logistic")
    fm.write(repo, "legacy_xgboost", booster, "xgboost", fm.config("legacy_xgboost", "xgboost", 30, 1))
    forest = fm.sklearn_forest("iris")
    cfg = fm.config("iris_forest", "treelite_checkpoint", 4, 3, predict_proba=True)
    fm.write(repo, "iris_forest", forest, "treelite_checkpoint", cfg)
    # a corrupt file, and a model_type naming another format than the folder holds
    corrupt = fm.write(repo, "corrupt", booster, "xgboost_json", fm.config("corrupt", "xgboost_json", 30, 1))
    path = corrupt / "1" / "xgboost.json"
    path.write_bytes(path.read_bytes()[:300])
    fm.write(repo, "mismatched", booster, "xgboost_json", fm.config("mismatched", "lightgbm", 30, 1))
    # SHAP values as the FIL backend's QA configures its xgboost_shap model: a multiclass XGBoost
    # model answering its class, treeshap_output [classes, features + 1]; a LightGBM binary one
    _with_shap(repo, "shap_xgboost", fm.xgboost("iris", "multi:softprob"), "xgboost_ubj", 4, "3, 5")
    _with_shap(repo, "shap_lightgbm", fm.lightgbm("cancer", "binary"), "lightgbm", 30, "31")
    return repo


def _with_shap(repo: Path, name: str, model: Any, model_type: str, features: int, shap_dims: str) -> None:
    cfg = fm.config(name, model_type, features, 1)
    shap = f'{{ name: "treeshap_output" data_type: TYPE_FP32 dims: [ {shap_dims} ] }}'
    fm.write(repo, name, model, model_type, cfg.replace("dims: [ 1 ] } ]", f"dims: [ 1 ] }}, {shap} ]"))


@pytest.fixture(scope="module")
def server(repo: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    with serving(repo, tmp_path_factory.mktemp("log") / "inferd-fil.log") as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: InferdProcess) -> Iterator[httpclient.InferenceServerClient]:
    with http_client(server, concurrency=8) as c:
        yield c


@pytest.fixture(scope="module")
def gclient(server: InferdProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpc_client(server) as c:
        yield c


def _http(client: Any, model: str, rows: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    inp = httpclient.InferInput("input__0", list(rows.shape), "FP32")
    inp.set_data_from_numpy(rows, binary_data=True)
    out = httpclient.InferRequestedOutput("output__0", binary_data=True)
    result: np.ndarray[Any, Any] = client.infer(model, [inp], outputs=[out]).as_numpy("output__0")
    return result


def test_broken_models_fail_their_load_and_the_others_serve(server: InferdProcess) -> None:
    index = {m["name"]: m for m in server.request("POST", "/v2/repository/index", {}).json()}
    ready = {"breast_cancer_xgboost", "diabetes_lightgbm", "batched_xgboost", "legacy_xgboost", "iris_forest"}
    ready |= {"shap_xgboost", "shap_lightgbm"}
    assert {n for n, m in index.items() if m["state"] == "READY"} == ready
    assert index["corrupt"]["state"] == "UNAVAILABLE"
    assert "Provided JSON could not be parsed as XGBoost model" in index["corrupt"]["reason"]
    assert index["mismatched"]["state"] == "UNAVAILABLE"
    reason = index["mismatched"]["reason"]
    assert "model_type 'lightgbm' reads 'model.txt'" in reason
    assert "the folder holds 'xgboost.json' (model_type 'xgboost_json')" in reason


def test_xgboost_classifier_over_http_equals_xgboost(client: Any, repo: Path) -> None:
    x, _ = fm.dataset("cancer")
    booster = xgb.Booster(model_file=str(repo / "breast_cancer_xgboost/1/xgboost.json"))
    p = booster.predict(xgb.DMatrix(x))
    want = np.stack([1 - p, p], axis=1)
    got = _http(client, "breast_cancer_xgboost", x)
    assert got.shape == (len(x), 2)
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-2)
    one = _http(client, "breast_cancer_xgboost", x[:1])
    np.testing.assert_allclose(one, want[:1], rtol=1e-3, atol=1e-2)


def test_lightgbm_regressor_over_grpc_equals_lightgbm(gclient: Any, repo: Path) -> None:
    x, _ = fm.dataset("diabetes")
    booster = lgb.Booster(model_file=str(repo / "diabetes_lightgbm/1/model.txt"))
    inp = grpcclient.InferInput("input__0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    got = gclient.infer("diabetes_lightgbm", [inp]).as_numpy("output__0")
    assert got.shape == (len(x),)  # dims [1], dropped as the FIL backend drops it
    np.testing.assert_allclose(got, booster.predict(x), rtol=1e-3, atol=1e-2)


def test_legacy_binary_and_checkpoint_models(client: Any) -> None:
    x, _ = fm.dataset("cancer")
    booster = fm.xgboost("cancer", "binary:logistic")
    labels = _http(client, "legacy_xgboost", x)
    assert int((labels != (booster.predict(xgb.DMatrix(x)) > 0.5)).sum()) <= 3
    iris, _ = fm.dataset("iris")
    got = _http(client, "iris_forest", iris)
    np.testing.assert_allclose(got, fm.sklearn_forest("iris").predict_proba(iris), rtol=1e-3, atol=1e-2)


def test_dynamic_batching_shares_executes(client: Any) -> None:
    x, _ = fm.dataset("cancer")
    rows = [x[i : i + 1] for i in range(8)]
    pending = []
    for r in rows:
        inp = httpclient.InferInput("input__0", [1, 30], "FP32")
        inp.set_data_from_numpy(r, binary_data=True)
        pending.append(client.async_infer("batched_xgboost", [inp]))
    answers = np.concatenate([p.get_result().as_numpy("output__0") for p in pending])
    np.testing.assert_allclose(answers, _http(client, "breast_cancer_xgboost", x[:8]), rtol=1e-6)
    stats = client.get_inference_statistics("batched_xgboost")["model_stats"][0]
    assert stats["inference_count"] == 8
    assert stats["execution_count"] < 8


def test_a_request_with_another_feature_count_is_refused(client: Any, gclient: Any) -> None:
    bad = np.zeros((2, 29), np.float32)
    with pytest.raises(InferenceServerException) as e:
        _http(client, "breast_cancer_xgboost", bad)
    assert (
        "unexpected shape for input 'input__0' for model 'breast_cancer_xgboost'. Expected [-1,30], got [2,29]"
        in str(e.value)
    )
    inp = grpcclient.InferInput("input__0", [2, 29], "FP32")
    inp.set_data_from_numpy(bad)
    with pytest.raises(InferenceServerException) as e:
        gclient.infer("diabetes_lightgbm", [inp])
    assert "Expected [-1,10], got [2,29]" in str(e.value)


def test_the_config_is_served_as_written(client: Any) -> None:
    cfg = client.get_model_config("diabetes_lightgbm")
    assert cfg["backend"] == "fil"
    assert cfg["parameters"]["model_type"]["string_value"] == "lightgbm"
    assert cfg["output"][0]["dims"] == [1]


def test_shap_values_over_http_and_grpc_equal_xgboosts_pred_contribs(
    client: Any, gclient: Any, repo: Path
) -> None:
    """The issue's bar: treeshap_output equal to XGBoost's pred_contribs within 1e-4, shaped as the
    FIL backend's QA expects ([rows, classes, features + 1]), the class in output__0."""
    booster = xgb.Booster(model_file=str(repo / "shap_xgboost/1/xgboost.ubj"))
    x, _ = fm.dataset("iris")
    want = booster.predict(xgb.DMatrix(x), pred_contribs=True)
    classes = booster.predict(xgb.DMatrix(x)).argmax(axis=1).astype(np.float32)
    inp = httpclient.InferInput("input__0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x, binary_data=True)
    outs = [httpclient.InferRequestedOutput(n, binary_data=True) for n in ("output__0", "treeshap_output")]
    result = client.infer("shap_xgboost", [inp], outputs=outs)
    got = result.as_numpy("treeshap_output")
    assert got.shape == (len(x), 3, 5) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(result.as_numpy("output__0"), classes)
    # gRPC, every output by default, one row a request
    for i in (0, 77, 149):
        ginp = grpcclient.InferInput("input__0", [1, 4], "FP32")
        ginp.set_data_from_numpy(x[i : i + 1])
        one = gclient.infer("shap_xgboost", [ginp])
        np.testing.assert_allclose(one.as_numpy("treeshap_output"), want[i : i + 1], rtol=0, atol=1e-4)
    # a request for output__0 alone gets it alone
    alone = client.infer("shap_xgboost", [inp], outputs=outs[:1]).get_response()
    assert [o["name"] for o in alone["outputs"]] == ["output__0"]
    meta = client.get_model_metadata("shap_xgboost")
    assert {o["name"]: o["shape"] for o in meta["outputs"]} == {
        "output__0": [-1, 1],
        "treeshap_output": [-1, 3, 5],
    }


def test_lightgbm_shap_values_over_grpc_equal_lightgbms_pred_contrib(gclient: Any, repo: Path) -> None:
    booster = lgb.Booster(model_file=str(repo / "shap_lightgbm/1/model.txt"))
    x, _ = fm.dataset("cancer")
    inp = grpcclient.InferInput("input__0", list(x.shape), "FP32")
    inp.set_data_from_numpy(x)
    got = gclient.infer("shap_lightgbm", [inp]).as_numpy("treeshap_output")
    assert got.shape == (len(x), 31)
    np.testing.assert_allclose(got, booster.predict(x, pred_contrib=True), rtol=1e-5, atol=1e-4)
