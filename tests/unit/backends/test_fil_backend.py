"""The fil backend: every model_type against its framework's own predict / predict_proba, the FIL
backend's parameters with its texts, NaN, outputs' shapes, batching, engines, threads, load errors.

The reference installed here (Triton 2.51 CPU) has no FIL backend, so the expected behaviour and
texts come from the FIL backend's source for that release (24.10: ``src/shared_state.h``,
``src/tl_model.h``, ``src/model.h``) and RAPIDS-Triton's ``get_config_param``. Tolerances are the
ones the FIL backend's own tests use (``qa/L0_e2e/test_model.py``): scores within rtol 1e-3 and
atol 1e-2; classes may differ in at most 3 rows (a score on the threshold may round either way).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xgboost as xgb

import fil_models as fm
import inferd
from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.fil import backend as fil_backend
from inferd.backends.fil import engine as fil_engine
from inferd.backends.fil.backend import FilBackend, FilModel
from inferd.backends.fil.params import fil_settings, ignored
from inferd.backends.registry import get_backend
from inferd.core.request import InferRequest
from inferd.core.tensor import Tensor
from inferd.errors import (
    InferdError,
    InternalError,
    InvalidArgumentError,
    UnavailableError,
    UnknownError,
    UnsupportedError,
)
from inferd.repository import (
    autofill_backend_fields,
    load_model_config,
    normalize_config,
    parse_config_text,
)

Array = np.ndarray[Any, Any]


def close_scores(got: Array, want: Any) -> None:  # want: a framework's predict(), an array or a list
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-2)


def close_classes(got: Array, want: Array) -> None:
    assert got.shape == want.shape
    assert int((got != want).sum()) <= 3, (got, want)


# -- loading ---------------------------------------------------------------------------------------


def _config(md: Path, name: str) -> Any:
    cfg, _ = load_model_config(md)
    autofill_backend_fields(cfg, name, md)
    FilBackend().auto_complete(cfg, md, md / "1", default_max_batch_size=4)
    normalize_config(cfg, name)
    return cfg


def load(tmp_path: Path, model: Any, model_type: str, config: str | None, name: str = "m") -> FilModel:
    md = fm.write(tmp_path, name, model, model_type, config)
    loaded = FilBackend().load(LoadContext(name, 1, md, md / "1", _config(md, name)))
    assert isinstance(loaded, FilModel)
    loaded.create_instance(InstanceSpec(f"{name}_0", "CPU", 0))  # the first starts XGBoost's loading
    assert loaded.forest.native_loaded.wait(60)  # XGBoost's engine loads in a thread of its own
    return loaded


def run(model: FilModel, *rows: Array) -> list[Array]:
    """One execute of requests holding ``rows`` each; their output__0 arrays."""
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    batching = model.max_batch_size > 0
    reqs = [
        InferRequest(
            model_name="m",
            inputs={"input__0": Tensor.from_array("input__0", r)},
            id=str(i),
            batch_size=r.shape[0] if batching else 0,
        )
        for i, r in enumerate(rows)
    ]
    outs = []
    for resp in inst.execute(reqs):
        if resp.error is not None:
            raise resp.error
        out = resp.outputs[0]
        assert out.array.dtype == np.float32 and out.datatype.wire == "FP32"
        outs.append(out.array)
    return outs


def both_engines(model: FilModel, x: Array) -> list[Array]:
    """The whole of ``x`` at once (XGBoost's engine), then row by row (GTIL's), stacked."""
    whole = run(model, x)[0]
    rows = run(model, *(x[i : i + 1] for i in range(x.shape[0])))
    return [whole, np.concatenate(rows)]


# -- every model type against its framework -------------------------------------------------------


def test_registered() -> None:
    assert isinstance(get_backend("fil"), FilBackend)


def test_an_unknown_backend_says_which_exist(tmp_path: Path) -> None:
    # any other name may be a C/C++ backend (backends/tritonc): a model that names it says so at load
    cfg = parse_config_text('name: "m" backend: "nope"', "test")
    with pytest.raises(InvalidArgumentError) as e:
        get_backend("nope").find_library(cfg, tmp_path, None)  # type: ignore[attr-defined]
    assert (
        "unable to find backend library for backend 'nope', try specifying runtime on the model configuration. "
        "inferd's backends are fil, onnxruntime, openvino" in str(e.value)
    )


@pytest.mark.parametrize("model_type", ["xgboost", "xgboost_json", "xgboost_ubj"])
def test_xgboost_binary_predict_proba(tmp_path: Path, model_type: str) -> None:
    booster = fm.xgboost("cancer", "binary:logistic")
    model = load(tmp_path, booster, model_type, fm.config("m", model_type, 30, 2, predict_proba=True))
    x, _ = fm.dataset("cancer")
    p = booster.predict(xgb.DMatrix(x))
    for got in both_engines(model, x):
        assert got.shape == (len(x), 2)
        close_scores(got, np.stack([1 - p, p], axis=1))


def test_binary_predict_proba_with_dims_1_answers_the_positive_class(tmp_path: Path) -> None:
    booster = fm.xgboost("cancer", "binary:logistic")
    model = load(tmp_path, booster, "xgboost_json", fm.config("m", "xgboost_json", 30, 1, predict_proba=True))
    x, _ = fm.dataset("cancer")
    (got,) = run(model, x)
    assert got.shape == (len(x),)  # dims [1]: the reference drops it
    close_scores(got, booster.predict(xgb.DMatrix(x)))


@pytest.mark.parametrize("threshold", [0.5, 0.3])
def test_xgboost_binary_classes_against_the_threshold(tmp_path: Path, threshold: float) -> None:
    booster = fm.xgboost("cancer", "binary:logistic")
    model = load(
        tmp_path, booster, "xgboost_json", fm.config("m", "xgboost_json", 30, 1, threshold=threshold)
    )
    x, _ = fm.dataset("cancer")
    want = (booster.predict(xgb.DMatrix(x)) > threshold).astype(np.float32)
    for got in both_engines(model, x):
        close_classes(got, want)


@pytest.mark.parametrize("objective", ["multi:softprob", "multi:softmax"])
def test_xgboost_multiclass(tmp_path: Path, objective: str) -> None:
    booster = fm.xgboost("iris", objective)
    x, _ = fm.dataset("iris")
    margins = booster.predict(xgb.DMatrix(x), output_margin=True)
    probs = np.exp(margins) / np.exp(margins).sum(axis=1, keepdims=True)
    proba = load(
        tmp_path / "p", booster, "xgboost_ubj", fm.config("m", "xgboost_ubj", 4, 3, predict_proba=True)
    )
    for got in both_engines(proba, x):
        close_scores(got, probs)
        if objective == "multi:softprob":
            close_scores(got, booster.predict(xgb.DMatrix(x)))
    classes = load(tmp_path / "c", booster, "xgboost_json", fm.config("m", "xgboost_json", 4, 1))
    for got in both_engines(classes, x):
        close_classes(got, probs.argmax(axis=1).astype(np.float32))
    if objective == "multi:softmax":  # its predict answers the class itself
        close_classes(run(classes, x)[0], booster.predict(xgb.DMatrix(x)))


def test_xgboost_regressor(tmp_path: Path) -> None:
    booster = fm.xgboost("diabetes", "reg:squarederror")
    cfg = fm.config("m", "xgboost", 10, 1, output_class=False, threshold=None)
    model = load(tmp_path, booster, "xgboost", cfg)
    x, _ = fm.dataset("diabetes")
    for got in both_engines(model, x):
        close_scores(got, booster.predict(xgb.DMatrix(x)))


def test_lightgbm_regressor_binary_and_multiclass(tmp_path: Path) -> None:
    reg = fm.lightgbm("diabetes", "regression")
    x, _ = fm.dataset("diabetes")
    cfg = fm.config("m", "lightgbm", 10, 1, output_class=False, threshold=None)
    for got in both_engines(load(tmp_path / "r", reg, "lightgbm", cfg), x):
        close_scores(got, reg.predict(x))

    binary = fm.lightgbm("cancer", "binary")
    x, _ = fm.dataset("cancer")
    p = binary.predict(x)
    (got,) = run(
        load(tmp_path / "b", binary, "lightgbm", fm.config("m", "lightgbm", 30, 2, predict_proba=True)), x
    )
    close_scores(got, np.stack([1 - p, p], axis=1))

    multi = fm.lightgbm("iris", "multiclass")
    x, _ = fm.dataset("iris")
    model = load(tmp_path / "m", multi, "lightgbm", fm.config("m", "lightgbm", 4, 1))
    close_classes(run(model, x)[0], multi.predict(x).argmax(axis=1).astype(np.float32))


@pytest.mark.parametrize(
    ("kind", "data", "width", "proba"),
    [
        ("rf_classifier", "iris", 3, True),
        ("extra_trees", "iris", 3, True),
        ("gb_classifier", "cancer", 2, True),
        ("rf_classifier", "cancer", 1, False),
    ],
)
def test_scikit_learn_forests_through_treelite_checkpoints(
    tmp_path: Path, kind: str, data: str, width: int, proba: bool
) -> None:
    forest = fm.sklearn_forest(data, kind)
    cfg = fm.config("m", "treelite_checkpoint", forest.n_features_in_, width, predict_proba=proba)
    model = load(tmp_path, forest, "treelite_checkpoint", cfg)
    x, _ = fm.dataset(data)
    for got in both_engines(model, x):
        if proba:
            close_scores(got, forest.predict_proba(x))
        else:
            close_classes(got, forest.predict(x).astype(np.float32))


def test_scikit_learn_regressor(tmp_path: Path) -> None:
    forest = fm.sklearn_forest("diabetes", "rf_regressor")
    cfg = fm.config("m", "treelite_checkpoint", 10, 1, output_class=False, threshold=None)
    x, _ = fm.dataset("diabetes")
    (got,) = run(load(tmp_path, forest, "treelite_checkpoint", cfg), x)
    close_scores(got, forest.predict(x))


# -- NaN -------------------------------------------------------------------------------------------


def _with_nan(x: Array) -> Array:
    x = x.copy()
    rng = np.random.default_rng(3)
    x[rng.random(x.shape) < 0.2] = np.nan
    return x


def test_nan_is_missing_as_xgboost_has_it(tmp_path: Path) -> None:
    booster = fm.xgboost("cancer", "binary:logistic")
    model = load(tmp_path, booster, "xgboost_json", fm.config("m", "xgboost_json", 30, 2, predict_proba=True))
    x = _with_nan(fm.dataset("cancer")[0])
    p = booster.predict(xgb.DMatrix(x))
    for got in both_engines(model, x):
        close_scores(got, np.stack([1 - p, p], axis=1))
    legacy = load(tmp_path / "l", booster, "xgboost", fm.config("m", "xgboost", 30, 2, predict_proba=True))
    close_scores(run(legacy, x)[0], np.stack([1 - p, p], axis=1))


def test_nan_as_lightgbm_has_it(tmp_path: Path) -> None:
    x, y = fm.dataset("diabetes")
    train = _with_nan(x)
    import lightgbm as lgb

    booster = lgb.train(
        {"objective": "regression", "verbose": -1, "num_threads": 1}, lgb.Dataset(train, y), 20
    )
    cfg = fm.config("m", "lightgbm", 10, 1, output_class=False, threshold=None)
    x_nan = _with_nan(x[::-1].copy())
    for got in both_engines(load(tmp_path, booster, "lightgbm", cfg), x_nan):
        close_scores(got, booster.predict(x_nan))


# -- parameters ------------------------------------------------------------------------------------


def _params(**params: str) -> Any:
    body = "\n".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in params.items()
    )
    return parse_config_text(f'backend: "fil"\n{body}\n', "m")


def test_settings_defaults_and_reading() -> None:
    s = fil_settings(_params(output_class="false"))
    assert (s.model_type, s.predict_proba, s.output_class, s.threshold, s.cpu_nthread) == (
        "xgboost",
        False,
        False,
        0.5,
        0,
    )
    s = fil_settings(_params(model_type="lightgbm", output_class="true", threshold="0.25", cpu_nthread="3"))
    assert (s.model_type, s.output_class, s.threshold, s.cpu_nthread) == ("lightgbm", True, 0.25, 3)
    # C++'s >> reads a leading number, and a value it cannot read falls back to the default
    assert fil_settings(_params(output_class="true", threshold="0.7x")).threshold == pytest.approx(0.7)
    assert fil_settings(_params(output_class="false", cpu_nthread="many")).cpu_nthread == 0
    # FIL 25.09's name for output_class
    assert fil_settings(_params(is_classifier="true", threshold="0.5")).output_class is True


@pytest.mark.parametrize(
    ("params", "error", "text"),
    [
        ({}, InvalidArgumentError, "Required parameter output_class not found in config"),
        ({"output_class": "true"}, InvalidArgumentError, "Required parameter threshold not found in config"),
        (
            {"output_class": "true", "threshold": "high"},
            InvalidArgumentError,
            "Bad input for parameter threshold",
        ),
        (
            {"output_class": "yes"},
            InternalError,
            "Expected 'true' or 'false' for parameter 'output_class', got: 'yes'",
        ),
        (
            {"predict_proba": "True", "output_class": "false"},
            InternalError,
            "parameter 'predict_proba', got: 'True'",
        ),
        (
            {"model_type": "onnx", "output_class": "false"},
            UnsupportedError,
            "onnx not recognized as a valid serialization format.",
        ),
    ],
)
def test_settings_errors_are_the_references(
    params: dict[str, str], error: type[InferdError], text: str
) -> None:
    with pytest.raises(error) as e:
        fil_settings(_params(**params))
    assert text in str(e.value)


def test_gpu_only_parameters_are_logged_once_and_ignored(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    extra = (
        ',\n  { key: "algo" value: { string_value: "TREE_REORG" } },\n'
        '  { key: "storage_type" value: { string_value: "SPARSE" } },\n'
        '  { key: "use_experimental_optimizations" value: { string_value: "true" } }'
    )
    booster = fm.xgboost("cancer", "binary:logistic")
    cfg = fm.config(
        "m", "xgboost_json", 30, 1, extra=extra + ',\n  { key: "num_class" value: { string_value: "2" } }'
    )
    assert ignored(parse_config_text(cfg, "m")) == ["algo", "storage_type", "use_experimental_optimizations"]
    caplog.set_level(logging.WARNING, logger="inferd.backends.fil")
    model = load(tmp_path, booster, "xgboost_json", cfg)
    for i in range(3):
        model.create_instance(InstanceSpec(f"m_{i}", "CPU", 0))
    lines = [r.getMessage() for r in caplog.records if "change nothing on CPU" in r.getMessage()]
    assert lines == [
        "model 'm': parameter(s) algo, storage_type, use_experimental_optimizations change nothing "
        "on CPU (GPU execution, or the FIL backend's other CPU engine): ignored"
    ]


def test_threads_from_cpu_nthread_or_the_cores_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    booster = fm.xgboost("cancer", "binary:logistic")
    monkeypatch.setattr(fil_backend, "available_cpus", lambda: 8)
    group = "instance_group [ { count: 3 kind: KIND_CPU } ]\n"
    cfg = fm.config("m", "xgboost_json", 30, 1).replace("instance_group [ { kind: KIND_AUTO } ]\n", group)
    assert load(tmp_path / "a", booster, "xgboost_json", cfg).threads == 2  # 8 cores, 3 instances
    extra = ',\n  { key: "cpu_nthread" value: { string_value: "5" } }'
    assert (
        load(
            tmp_path / "b", booster, "xgboost_json", fm.config("m", "xgboost_json", 30, 1, extra=extra)
        ).threads
        == 5
    )


def test_kind_gpu_is_refused_and_kind_auto_stays_on_the_cpu(tmp_path: Path) -> None:
    """This fil backend runs on the CPU: KIND_AUTO is KIND_CPU where GPUs are found (gpu_available),
    and a KIND_GPU instance fails its load saying so."""
    assert FilBackend().gpu_available() is False
    model = load(
        tmp_path,
        fm.xgboost("cancer", "binary:logistic"),
        "xgboost_json",
        fm.config("m", "xgboost_json", 30, 1),
    )
    with pytest.raises(UnavailableError, match="is KIND_GPU, but the fil backend runs on the CPU"):
        model.create_instance(InstanceSpec("m_0", "GPU", 0))


# -- engines ---------------------------------------------------------------------------------------


def test_small_calls_run_on_gtil_large_ones_on_xgboost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    booster = fm.xgboost("cancer", "binary:logistic", trees=20)
    model = load(tmp_path, booster, "xgboost_json", fm.config("m", "xgboost_json", 30, 2, predict_proba=True))
    forest = model.forest
    assert forest.engine == "xgboost+treelite-gtil"
    calls: list[tuple[str, int, int]] = []
    small, large = forest._small, forest._large

    def spy(name: str, engine: Any) -> Any:
        return lambda x, threads: calls.append((name, x.shape[0], threads)) or engine(x, threads)

    monkeypatch.setattr(forest, "_small", spy("gtil", small))
    monkeypatch.setattr(forest, "_large", spy("xgboost", large))
    x, _ = fm.dataset("cancer")
    limit = fil_engine.GTIL_MAX_WORK // 20  # rows of 20 trees GTIL takes
    run(model, x[:limit])
    run(model, x[: limit + 1])
    assert [c[:2] for c in calls] == [("gtil", limit), ("xgboost", limit + 1)]


def test_gtil_answers_until_xgboost_is_loaded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import threading

    release = threading.Event()
    real = fil_engine._xgboost

    def slow(*args: Any) -> Any:
        assert release.wait(60)
        return real(*args)

    monkeypatch.setattr(fil_engine, "_xgboost", slow)
    booster = fm.xgboost("cancer", "binary:logistic")
    md = fm.write(
        tmp_path, "m", booster, "xgboost_json", fm.config("m", "xgboost_json", 30, 2, predict_proba=True)
    )
    model = FilBackend().load(LoadContext("m", 1, md, md / "1", _config(md, "m")))
    assert isinstance(model, FilModel)
    forest = model.forest
    assert not forest.native_loaded.is_set() and forest._large is forest._small
    x, _ = fm.dataset("cancer")
    p = booster.predict(xgb.DMatrix(x))
    close_scores(run(model, x)[0][:, 1], p)  # a large call, on GTIL
    release.set()
    assert forest.native_loaded.wait(60)
    assert forest.engine == "xgboost+treelite-gtil" and forest._large is not forest._small
    close_scores(run(model, x)[0][:, 1], p)


def test_lightgbm_runs_lightgbm_whose_nan_differs_from_gtils(tmp_path: Path) -> None:
    """zero_as_missing: LightGBM reads NaN as 0 where Treelite's GTIL does not; LightGBM's answer is
    the framework's, so a LightGBM model never runs on GTIL, not even before READY."""
    import lightgbm as lgb

    x, y = fm.dataset("diabetes")
    params = {"objective": "regression", "verbose": -1, "num_threads": 1, "zero_as_missing": True}
    booster = lgb.train(params, lgb.Dataset(x, y), 20)
    cfg = fm.config("m", "lightgbm", 10, 1, output_class=False, threshold=None)
    model = load(tmp_path, booster, "lightgbm", cfg)
    assert model.forest.engine == "lightgbm"
    x_nan = _with_nan(x)
    for got in both_engines(model, x_nan):
        close_scores(got, booster.predict(x_nan))


def test_lightgbm_categories_between_minus_one_and_zero_are_lightgbms(tmp_path: Path) -> None:
    """LightGBM casts a category to int (-0.5 is category 0); Treelite's GTIL, the reference's CPU
    engine, takes any negative value as no category. A LightGBM model runs on LightGBM: its answer."""
    import lightgbm as lgb
    import treelite

    x, y = fm.categorical_dataset()
    y = y + 100.0 * (x[:, 1] == 0)  # category 0 on its own side of the splits
    params = {"objective": "regression", "verbose": -1, "num_threads": 1, "min_data_per_group": 5}
    booster = lgb.train(params, lgb.Dataset(x, y, categorical_feature=[1]), 20)
    cfg = fm.config("m", "lightgbm", 10, 1, output_class=False, threshold=None)
    model = load(tmp_path, booster, "lightgbm", cfg)
    rows = np.repeat(x[:1], 3, axis=0)
    rows[:, 1] = [0.0, -0.5, -1.0]
    got = run(model, rows)[0]
    close_scores(got, booster.predict(rows))
    gtil = treelite.gtil.predict(model.forest.model, rows)[:, 0, 0]
    assert got[1] == pytest.approx(got[0]) and gtil[1] != pytest.approx(gtil[0])  # -0.5: category 0 here only
    assert gtil[1] == pytest.approx(gtil[2])  # for GTIL as -1 (no category)


def test_openmp_threads_sleep_when_idle_unless_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    fil_engine.passive_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    fil_engine.passive_openmp()
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"


def test_a_model_xgboost_cannot_read_runs_on_gtil(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("no")

    monkeypatch.setattr(fil_engine, "_xgboost", broken)
    booster = fm.xgboost("cancer", "binary:logistic")
    model = load(tmp_path, booster, "xgboost_json", fm.config("m", "xgboost_json", 30, 2, predict_proba=True))
    assert model.forest.engine == "treelite-gtil"
    x, _ = fm.dataset("cancer")
    close_scores(run(model, x)[0][:, 1], booster.predict(xgb.DMatrix(x)))


# -- shapes and batching ---------------------------------------------------------------------------


def test_requests_of_a_batch_get_their_own_rows(tmp_path: Path) -> None:
    booster = fm.xgboost("iris", "multi:softprob")
    model = load(tmp_path, booster, "xgboost_json", fm.config("m", "xgboost_json", 4, 3, predict_proba=True))
    x, _ = fm.dataset("iris")
    parts = [x[:1], x[1:40], x[40:41], x[41:]]
    outs = run(model, *parts)
    assert [o.shape for o in outs] == [(1, 3), (39, 3), (1, 3), (109, 3)]
    close_scores(np.concatenate(outs), booster.predict(xgb.DMatrix(x)))


def test_without_batching_rows_are_the_first_dimension(tmp_path: Path) -> None:
    booster = fm.xgboost("cancer", "binary:logistic")
    cfg = (
        fm.config("m", "xgboost_json", 30, 1, max_batch_size=0)
        .replace("dims: [ 30 ]", "dims: [ -1, 30 ]")
        .replace("dims: [ 1 ]", "dims: [ -1, 1 ]")
        .replace("dynamic_batching { }\n", "")
    )
    model = load(tmp_path, booster, "xgboost_json", cfg)
    x, _ = fm.dataset("cancer")
    (got,) = run(model, x[:7])
    assert got.shape == (7,)
    close_classes(got, (booster.predict(xgb.DMatrix(x[:7])) > 0.5).astype(np.float32))


def test_variable_feature_dims_are_checked_per_request(tmp_path: Path) -> None:
    booster = fm.xgboost("iris", "multi:softprob")
    cfg = fm.config("m", "xgboost_json", 4, 3, predict_proba=True).replace("dims: [ 4 ]", "dims: [ -1 ]")
    model = load(tmp_path, booster, "xgboost_json", cfg)
    x, _ = fm.dataset("iris")
    close_scores(run(model, x[:5])[0], booster.predict(xgb.DMatrix(x[:5])))
    with pytest.raises(InvalidArgumentError) as e:
        run(model, np.zeros((2, 5), np.float32))
    assert "input 'input__0' has shape [2, 5], but model 'm' reads [rows, 4]" in str(e.value)


def test_auto_complete_from_the_model_file(tmp_path: Path) -> None:
    booster = fm.xgboost("cancer", "binary:logistic")
    cfg = 'backend: "fil"\nparameters [ { key: "model_type" value: { string_value: "xgboost_json" } },\n'
    cfg += '{ key: "output_class" value: { string_value: "true" } },\n'
    cfg += '{ key: "threshold" value: { string_value: "0.5" } },\n'
    cfg += '{ key: "predict_proba" value: { string_value: "true" } } ]\n'
    md = fm.write(tmp_path, "m", booster, "xgboost_json", cfg)
    completed = _config(md, "m")
    assert completed.max_batch_size == 4 and completed.HasField("dynamic_batching")
    assert [(i.name, list(i.dims)) for i in completed.input] == [("input__0", [30])]
    assert [(o.name, list(o.dims)) for o in completed.output] == [("output__0", [2])]


# -- errors ----------------------------------------------------------------------------------------


def _load_error(tmp_path: Path, model: Any, model_type: str, config: str) -> InferdError:
    with pytest.raises(InferdError) as e:
        load(tmp_path, model, model_type, config)
    return e.value


def test_a_corrupt_file_fails_the_load_with_treelites_words(tmp_path: Path) -> None:
    md = fm.write(
        tmp_path,
        "m",
        fm.xgboost("cancer", "binary:logistic"),
        "xgboost_json",
        fm.config("m", "xgboost_json", 30, 1),
    )
    path = md / "1" / "xgboost.json"
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(UnknownError) as e:
        FilBackend().load(LoadContext("m", 1, md, md / "1", _config(md, "m")))
    assert "Provided JSON could not be parsed as XGBoost model" in str(e.value)
    assert not str(e.value).split("': ", 1)[1].startswith("[")  # Treelite's time and file prefix dropped


def test_a_model_type_that_does_not_match_the_file(tmp_path: Path) -> None:
    booster = fm.xgboost("cancer", "binary:logistic")
    # the folder holds xgboost.json, the config says lightgbm: model.txt is missing
    md = fm.write(tmp_path, "m", booster, "xgboost_json", fm.config("m", "lightgbm", 30, 1))
    with pytest.raises(UnavailableError) as e:
        FilBackend().load(LoadContext("m", 1, md, md / "1", _config(md, "m")))
    assert "model_type 'lightgbm' reads 'model.txt'" in str(e.value)
    assert "the folder holds 'xgboost.json' (model_type 'xgboost_json')" in str(e.value)
    # the file named, read as the wrong format: refused before Treelite reads it (check_lightgbm.py),
    # in Treelite's words
    cfg = fm.config("m", "lightgbm", 30, 1).replace(
        'backend: "fil"', 'backend: "fil"\ndefault_model_filename: "xgboost.json"'
    )
    (md / "config.pbtxt").write_text(cfg)
    with pytest.raises(UnknownError) as unknown:
        FilBackend().load(LoadContext("m", 1, md, md / "1", _config(md, "m")))
    assert "as model_type 'lightgbm': Ill-formed LightGBM model file: need max_feature_idx" in str(
        unknown.value
    )


@pytest.mark.parametrize(
    ("edit", "text"),
    [
        (
            ("dims: [ 30 ]", "dims: [ 29 ]"),
            "input 'input__0' has dims [29] a row in the model configuration, but the model reads 30 feature(s) a row: set its dims to [ 30 ]",
        ),
        (
            ("dims: [ 2 ]", "dims: [ 3 ]"),
            "output 'output__0' has dims [3] a row, but this model answers 2 value(s) a row with predict_proba true and output_class true (1 class score(s)): set its dims to [ 2 ] or [ 1 ]",
        ),
        (
            ('name: "input__0"', 'name: "features"'),
            "the fil backend reads input 'input__0' (the FIL backend's name), but the model configuration lists 'features'",
        ),
        (
            ("TYPE_FP32 dims: [ 30 ]", "TYPE_FP64 dims: [ 30 ]"),
            "input 'input__0' is TYPE_FP64, which the fil backend does not serve",
        ),
        (
            (
                "dims: [ 2 ] } ]",
                'dims: [ 2 ] }, { name: "treeshap_output" data_type: TYPE_FP32 dims: [ 30 ] } ]',
            ),
            "output 'treeshap_output' has dims [30] a row, but this model answers 31 SHAP value(s) a row (1 "
            "class score(s) of 30 feature(s) and the bias): set its dims to [ 31 ]",
        ),
        (
            ("dims: [ 2 ] } ]", 'dims: [ 2 ] }, { name: "scores" data_type: TYPE_FP32 dims: [ 2 ] } ]'),
            "the fil backend answers output 'output__0' and 'treeshap_output' only, not 'scores'",
        ),
    ],
)
def test_a_config_that_contradicts_the_model_fails_the_load(
    tmp_path: Path, edit: tuple[str, str], text: str
) -> None:
    cfg = fm.config("m", "xgboost_json", 30, 2, predict_proba=True)
    assert edit[0] in cfg
    err = _load_error(tmp_path, fm.xgboost("cancer", "binary:logistic"), "xgboost_json", cfg.replace(*edit))
    assert text in str(err)


def test_requests_of_the_wrong_shape_get_the_cores_error(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    fm.write(
        repo,
        "m",
        fm.xgboost("cancer", "binary:logistic"),
        "xgboost_json",
        fm.config("m", "xgboost_json", 30, 1),
    )
    with inferd.Server(model_repository=repo) as server:
        with pytest.raises(InvalidArgumentError) as e:
            server.infer("m", {"input__0": np.zeros((2, 29), np.float32)})
        assert "unexpected shape for input 'input__0' for model 'm'. Expected [-1,30], got [2,29]" in str(
            e.value
        )
        with pytest.raises(InvalidArgumentError):
            server.infer("m", {"input__0": np.zeros((2, 30), np.float64)})
        assert server.infer("m", {"input__0": np.zeros((2, 30), np.float32)})["output__0"].shape == (2,)
