"""The fil backend's SHAP values (``treeshap_output``) and the engine work of a model that fails its load.

SHAP values are the frameworks' own (XGBoost's ``pred_contribs``, LightGBM's ``pred_contrib``), in
the FIL backend's layout: [rows, features + 1] for a regressor or binary classifier, [rows, classes,
features + 1] for a multiclass one (its QA's ``generate_example_model.py``, its
``src/cpu_treeshap_model.h``). The issue's bar: equal to ``pred_contribs`` within 1e-4.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xgboost as xgb

import fil_models as fm
import inferd
from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.fil import engine as fil_engine
from inferd.backends.fil.backend import FilBackend, FilModel
from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.tensor import Tensor
from inferd.errors import InferdError, InvalidArgumentError, UnavailableError
from inferd.repository import autofill_backend_fields, load_model_config, normalize_config

Array = np.ndarray[Any, Any]
SHAP = "treeshap_output"
ATOL = 1e-4


def shap_config(
    model_type: str, features: int, width: int, shap_dims: str, *, max_batch_size: int = 8192, **kw: Any
) -> str:
    """``fm.config`` with the FIL backend's second output, as its docs and QA write it."""
    cfg = fm.config("m", model_type, features, width, max_batch_size=max_batch_size, **kw)
    out = f"dims: [ {width} ] }} ]"
    assert out in cfg
    return cfg.replace(
        out, f'dims: [ {width} ] }}, {{ name: "{SHAP}" data_type: TYPE_FP32 dims: [ {shap_dims} ] }} ]'
    )


def load(tmp_path: Path, model: Any, model_type: str, config: str) -> FilModel:
    md = fm.write(tmp_path, "m", model, model_type, config)
    cfg, _ = load_model_config(md)
    autofill_backend_fields(cfg, "m", md)
    normalize_config(cfg, "m")
    loaded = FilBackend().load(LoadContext("m", 1, md, md / "1", cfg))
    assert isinstance(loaded, FilModel)
    return loaded


def run(model: FilModel, *rows: Array, outputs: list[str] | None = None) -> list[dict[str, Array]]:
    """One execute of requests holding ``rows`` each (asking for ``outputs``, all by default)."""
    inst = model.create_instance(InstanceSpec("m_0", "CPU", 0))
    batching = model.max_batch_size > 0
    reqs = [
        InferRequest(
            model_name="m",
            inputs={"input__0": Tensor.from_array("input__0", r)},
            id=str(i),
            batch_size=r.shape[0] if batching else 0,
            outputs=None if outputs is None else [RequestedOutput(n) for n in outputs],
        )
        for i, r in enumerate(rows)
    ]
    answers = []
    for resp in inst.execute(reqs):
        if resp.error is not None:
            raise resp.error
        answers.append({o.name: o.array for o in resp.outputs})
    inst.unload()
    return answers


def contribs(booster: Any, x: Array) -> Array:
    got: Array = booster.predict(xgb.DMatrix(x), pred_contribs=True)
    return got


# -- XGBoost ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_type", ["xgboost_json", "xgboost_ubj"])
def test_binary_classifier_shap_values_are_xgboosts(tmp_path: Path, model_type: str) -> None:
    booster = fm.xgboost("cancer", "binary:logistic")
    model = load(tmp_path, booster, model_type, shap_config(model_type, 30, 1, "31"))
    x, _ = fm.dataset("cancer")
    out = run(model, x)[0]
    assert out[SHAP].dtype == np.float32 and out[SHAP].shape == (x.shape[0], 31)
    np.testing.assert_allclose(out[SHAP], contribs(booster, x), rtol=0, atol=ATOL)
    # the values add up to the margin (XGBoost's own property), the classes still answered
    margin = booster.predict(xgb.DMatrix(x), output_margin=True)
    np.testing.assert_allclose(out[SHAP].sum(axis=1), margin, rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(
        out["output__0"], (booster.predict(xgb.DMatrix(x)) > 0.5).astype(np.float32)
    )


@pytest.mark.parametrize("objective", ["multi:softprob", "multi:softmax"])
def test_multiclass_shap_values_are_per_class(tmp_path: Path, objective: str) -> None:
    """[rows, classes, features + 1], as the FIL backend's QA configures ``xgboost_shap`` (dims
    [classes, features + 1]); a flat [classes * (features + 1)] is the same values."""
    booster = fm.xgboost("iris", objective)
    x, _ = fm.dataset("iris")
    want = contribs(booster, x)
    assert want.shape == (x.shape[0], 3, 5)
    model = load(tmp_path / "a", booster, "xgboost_json", shap_config("xgboost_json", 4, 1, "3, 5"))
    got = run(model, x)[0][SHAP]
    assert got.shape == (x.shape[0], 3, 5)
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    flat = load(tmp_path / "b", booster, "xgboost_json", shap_config("xgboost_json", 4, 1, "15"))
    np.testing.assert_allclose(run(flat, x)[0][SHAP], want.reshape(-1, 15), rtol=0, atol=ATOL)


def test_regressor_shap_values_and_every_request_its_rows(tmp_path: Path) -> None:
    booster = fm.xgboost("diabetes", "reg:squarederror")
    cfg = shap_config("xgboost_json", 10, 1, "11", output_class=False, threshold=None)
    model = load(tmp_path, booster, "xgboost_json", cfg)
    x, _ = fm.dataset("diabetes")
    answers = run(model, x[:3], x[3:4], x[4:9])
    want = contribs(booster, x[:9])
    got = np.concatenate([a[SHAP] for a in answers])
    assert [a[SHAP].shape[0] for a in answers] == [3, 1, 5]
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)


def test_without_batching_the_rows_are_the_first_dimension(tmp_path: Path) -> None:
    booster = fm.xgboost("cancer", "binary:logistic")
    cfg = shap_config("xgboost_json", 30, 1, "31", max_batch_size=0)
    cfg = cfg.replace("dims: [ 30 ]", "dims: [ -1, 30 ]").replace("dims: [ 1 ]", "dims: [ -1, 1 ]")
    cfg = cfg.replace("dims: [ 31 ]", "dims: [ -1, 31 ]")
    model = load(tmp_path, booster, "xgboost_json", cfg)
    x, _ = fm.dataset("cancer")
    np.testing.assert_allclose(run(model, x[:7])[0][SHAP], contribs(booster, x[:7]), rtol=0, atol=ATOL)


def test_infinite_and_missing_inputs_are_answered(tmp_path: Path) -> None:
    """XGBoost's DMatrix refuses inf; FIL answers it. Clipped to FLT_MAX it takes inf's branches: the
    same values as XGBoost gives a row with +-FLT_MAX there; NaN is missing, as XGBoost has it."""
    booster = fm.xgboost("cancer", "binary:logistic")
    model = load(tmp_path, booster, "xgboost_json", shap_config("xgboost_json", 30, 1, "31"))
    x, _ = fm.dataset("cancer")
    x = x[:4].copy()
    x[0, :] = np.inf
    x[1, :] = -np.inf
    x[2, ::2] = np.nan
    big = np.float32(np.finfo(np.float32).max)
    got = run(model, x)[0][SHAP]
    np.testing.assert_allclose(got, contribs(booster, np.clip(x, -big, big)), rtol=0, atol=ATOL)
    assert np.isfinite(got).all()


def test_shap_values_run_only_for_requests_that_ask(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    booster = fm.xgboost("cancer", "binary:logistic")
    model = load(tmp_path, booster, "xgboost_json", shap_config("xgboost_json", 30, 1, "31"))
    calls: list[int] = []
    real = model.forest.contributions
    monkeypatch.setattr(model.forest, "contributions", lambda x: calls.append(x.shape[0]) or real(x))
    x, _ = fm.dataset("cancer")
    only = run(model, x[:5], outputs=["output__0"])[0]
    assert list(only) == ["output__0"] and calls == []
    both = run(model, x[:5], x[5:7], outputs=None)
    assert calls == [7] and all(SHAP in a for a in both)
    # never run on the server's loop (scheduling/inline.py), as a score-only model may be
    assert model.create_instance(InstanceSpec("m_1", "CPU", 0)).inline_ok is False


# -- LightGBM --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "objective", "classes", "dims"),
    [("cancer", "binary", 1, "31"), ("iris", "multiclass", 3, "3, 5"), ("diabetes", "regression", 1, "11")],
)
def test_lightgbm_shap_values_are_lightgbms(
    tmp_path: Path, data: str, objective: str, classes: int, dims: str
) -> None:
    booster = fm.lightgbm(data, objective)
    x, _ = fm.dataset(data)
    features = x.shape[1]
    kw: dict[str, Any] = {} if objective != "regression" else {"output_class": False, "threshold": None}
    model = load(tmp_path, booster, "lightgbm", shap_config("lightgbm", features, 1, dims, **kw))
    got = run(model, x)[0][SHAP]
    want = booster.predict(x, pred_contrib=True)
    shape = (x.shape[0], features + 1) if classes == 1 else (x.shape[0], classes, features + 1)
    assert got.shape == shape and got.dtype == np.float32
    np.testing.assert_allclose(got.reshape(want.shape), want, rtol=1e-5, atol=ATOL)


# -- refused at load -------------------------------------------------------------------------------


def test_model_types_no_framework_reads_are_refused_with_what_to_do(tmp_path: Path) -> None:
    """Treelite computes no SHAP values: legacy binary XGBoost (XGBoost 3 reads it no more) and
    Treelite checkpoints have no engine for them here."""
    booster = fm.xgboost("cancer", "binary:logistic")
    with pytest.raises(InvalidArgumentError) as e:
        load(tmp_path / "a", booster, "xgboost", shap_config("xgboost", 30, 1, "31"))
    assert (
        "unable to load model 'm': output 'treeshap_output' (SHAP values) is computed here by XGBoost or "
        "LightGBM, which read model_type xgboost_json, xgboost_ubj, lightgbm, not 'xgboost' (Treelite "
        "computes none): remove the output, or save the model as XGBoost's JSON (model_type xgboost_json)"
    ) in str(e.value)
    forest = fm.sklearn_forest("iris")
    cfg = shap_config("treelite_checkpoint", 4, 3, "3, 5", predict_proba=True)
    with pytest.raises(
        InvalidArgumentError, match=re.escape("not 'treelite_checkpoint' (Treelite computes none): remove")
    ):
        load(tmp_path / "b", forest, "treelite_checkpoint", cfg)


@pytest.mark.parametrize(
    ("dims", "text"),
    [
        (
            "5",
            "has dims [5] a row, but this model answers 15 SHAP value(s) a row (3 class score(s) of 4 "
            "feature(s) and the bias): set its dims to [ 3, 5 ]",
        ),
        ("-1, 5", "has dims [-1,5] a row"),
    ],
)
def test_dims_other_than_the_models_are_refused(tmp_path: Path, dims: str, text: str) -> None:
    booster = fm.xgboost("iris", "multi:softprob")
    with pytest.raises(InvalidArgumentError) as e:
        load(tmp_path, booster, "xgboost_json", shap_config("xgboost_json", 4, 1, dims))
    assert text in str(e.value)


def test_a_file_xgboost_cannot_read_fails_a_shap_models_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without SHAP values such a model runs on GTIL; with them it cannot answer: refused."""

    def broken(*_: Any) -> Any:
        raise RuntimeError("no")

    monkeypatch.setattr(fil_engine, "_xgboost_booster", broken)
    booster = fm.xgboost("cancer", "binary:logistic")
    with pytest.raises(UnavailableError) as e:
        load(tmp_path, booster, "xgboost_json", shap_config("xgboost_json", 30, 1, "31"))
    assert (
        "its SHAP values ('treeshap_output') are XGBoost's, and XGBoost failed on 'xgboost.json': no"
        in str(e.value)
    )


# -- a failed load leaves no engine work behind ----------------------------------------------------


def _loaders(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == f"fil-xgboost-{name}"]


class _SlowXGBoost:
    """``_xgboost_booster`` held until released, counting the calls; ``_xgboost`` counted."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.reads = 0
        self.engines = 0
        real_read, real_engine = fil_engine._xgboost_booster, fil_engine._xgboost

        def read(*args: Any) -> Any:
            self.reads += 1
            self.entered.set()
            assert self.release.wait(60)
            return real_read(*args)

        def engine(*args: Any) -> Any:
            self.engines += 1
            return real_engine(*args)

        monkeypatch.setattr(fil_engine, "_xgboost_booster", read)
        monkeypatch.setattr(fil_engine, "_xgboost", engine)


def test_a_refused_config_never_starts_xgboosts_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = _SlowXGBoost(monkeypatch)
    slow.release.set()
    booster = fm.xgboost("cancer", "binary:logistic")
    fm.write(tmp_path, "refused", booster, "xgboost_json", fm.config("refused", "xgboost_json", 30, 3))
    with inferd.Server(tmp_path, model_control_mode="explicit") as server:
        with pytest.raises(InferdError, match=re.escape("output 'output__0' has dims [3] a row")):
            server.load_model("refused")
        assert slow.reads == 0 and _loaders("refused") == []


def test_a_load_failing_after_its_instances_stops_xgboosts_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A warm-up that fails after the instance is made: the loading under way drops XGBoost's
    booster at its next step; no engine is built and the thread ends."""
    slow = _SlowXGBoost(monkeypatch)
    booster = fm.xgboost("cancer", "binary:logistic")
    warmup = """
model_warmup [ { name: "w" batch_size: 1 inputs { key: "input__0" value: {
  data_type: TYPE_FP32 dims: [ 30 ] input_data_file: "missing.bin" } } } ]
"""
    fm.write(tmp_path, "warm", booster, "xgboost_json", fm.config("warm", "xgboost_json", 30, 1) + warmup)
    with inferd.Server(tmp_path, model_control_mode="explicit") as server:
        with pytest.raises(InferdError, match="warm"):
            server.load_model("warm")
        loaders = _loaders("warm")
        assert slow.entered.wait(60) and len(loaders) == 1  # the instance started it; the load failed
        slow.release.set()
        loaders[0].join(60)
        assert not loaders[0].is_alive()
        assert slow.reads == 1 and slow.engines == 0


def test_unloading_a_model_stops_xgboosts_loading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    slow = _SlowXGBoost(monkeypatch)
    booster = fm.xgboost("cancer", "binary:logistic")
    fm.write(tmp_path, "m", booster, "xgboost_json", fm.config("m", "xgboost_json", 30, 1))
    x, _ = fm.dataset("cancer")
    with inferd.Server(tmp_path, model_control_mode="explicit") as server:
        server.load_model("m")
        assert server.infer("m", {"input__0": x[:2]})["output__0"].shape == (2,)  # GTIL meanwhile
        assert slow.entered.wait(60)
        loaders = _loaders("m")
        server.unload_model("m")
        slow.release.set()
        loaders[0].join(60)
        assert not loaders[0].is_alive() and slow.engines == 0
