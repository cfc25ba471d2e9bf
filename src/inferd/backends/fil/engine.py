"""A FIL model version's forest and the engines that run it.

Every model is first read by Treelite, as the reference reads it (``src/tl_utils.h``): so a file
the reference refuses is refused here with Treelite's words, and the forest's shape (features,
classes, trees) comes from one place whatever the format. What runs it was chosen by measurement
(BENCHMARKS.md, "Component measurements (hand-run)", FIL engines; 2 cores, one thread, 100 trees
of depth 6, 32 features):

- XGBoost's ``inplace_predict`` costs about 200 us a call whatever the rows (buffers it allocates
  per call), then 0.005 us a row and tree; Treelite's GTIL (``treelite.gtil.predict``, the
  reference's CPU engine) about 25 us a call through its Python function (10 us through its C API,
  which :func:`_gtil` calls), then 0.08 us a row and tree. So a small call
  (rows x trees up to :data:`GTIL_MAX_WORK`) runs on GTIL, a larger one on XGBoost: 32 against
  212 us for one row, 0.7 against 8.2 ms for 1,024 rows. XGBoost (with scikit-learn, which it
  imports: about a second) loads after READY, GTIL answering meanwhile (:class:`Forest`), unless
  the config asks for SHAP values, which only XGBoost computes: then before.
- LightGBM's ``predict`` was faster than GTIL at every size measured (60 against 120 us for one
  row, 15 against 25 ms for 1,024): LightGBM runs LightGBM models.
- legacy binary XGBoost (XGBoost 3 no longer reads it) and Treelite checkpoints (scikit-learn's
  forests) run on GTIL, their only engine.
- TL2cgen (the forest compiled to C) ran one row in 54 us and 1,024 in 4.9 ms, but compiling 100
  trees took 10 s: a 1,000-tree model could not be READY in 2 s. Not used.

Answers are the framework's own (``predict``: the objective's transformation applied), GTIL's the
same to float rounding; XGBoost's ``multi:softmax``, whose ``predict`` answers labels, gives its
softmax scores as GTIL does. :func:`fil_output` then shapes them as the reference does: class
scores (``predict_proba``), the class (``output_class``: the highest score, or the score against
``threshold`` for a binary model) or the scores as they are. Calls with little work run on one
thread (:data:`PARALLEL_MIN_WORK`): a thread team costs more than it gives there (one row: 0.15 ms
on one thread, 0.26 on two); and OpenMP's idle threads sleep (:func:`passive_openmp`).
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from inferd.backends.fil.check_checkpoint import check_checkpoint
from inferd.backends.fil.check_common import ModelFileError
from inferd.backends.fil.check_forest import check_forest
from inferd.backends.fil.check_lightgbm import check_lightgbm
from inferd.backends.fil.check_xgboost import check_json, check_legacy, check_ubjson
from inferd.backends.fil.params import FilSettings
from inferd.backends.fil.shap import contributions
from inferd.backends.native import import_lazily
from inferd.errors import InternalError, UnavailableError, UnknownError

log = logging.getLogger("inferd.backends.fil")

Array = np.ndarray[Any, Any]

#: rows x trees up to which an XGBoost model runs on GTIL (both engines cost the same at about
#: 2,400 on the machine measured: 200 us of XGBoost's fixed cost over GTIL's 0.08 us a row-tree)
GTIL_MAX_WORK = 2048
#: rows x trees from which a call uses the instance's threads (below: one thread)
PARALLEL_MIN_WORK = 65536

_TL_PREFIX = re.compile(r"^\[\d\d:\d\d:\d\d\] \S+:\d+: ", re.MULTILINE)


def passive_openmp() -> None:
    """OpenMP threads that sleep when idle (``OMP_WAIT_POLICY=PASSIVE``) unless the environment says
    otherwise, set before XGBoost, LightGBM and Treelite load their OpenMP runtimes (each reads it
    once, at its load; three copies here). Spinning idle threads are libgomp's default, and on a
    loaded 2-core machine they made a 2-thread XGBoost call on one row take 25 ms (p50) against
    0.26 ms passive, and 1,024 rows 5.7 ms (mean) against 0.7 ms: the ONNX Runtime backend's first
    instance does not spin for the same reason. It applies to the whole process (and the processes it
    starts), from the first tree model's load on."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@dataclass(frozen=True, slots=True)
class ForestShape:
    """What the model file says of the forest: features a row, scores a row, trees."""

    num_feature: int
    num_class: int  # the reference's num_classes: 1 for a regressor or a binary classifier
    num_tree: int


def treelite_text(e: Exception) -> str:
    """Treelite's message without its time and source-file prefix."""
    return _TL_PREFIX.sub("", str(e)).strip()


#: each model_type's checks before a native parser reads the file (issue 42: check_*.py)
FILE_CHECKS: dict[str, Callable[[bytes], None]] = {
    "xgboost": check_legacy,
    "xgboost_json": check_json,
    "xgboost_ubj": check_ubjson,
    "lightgbm": check_lightgbm,
    "treelite_checkpoint": check_checkpoint,
}


def read_treelite(path: Path, settings: FilSettings) -> Any:
    """The model file as Treelite reads it for the reference, checked before and after (a model file
    is untrusted input: ``check_common.py``); UnknownError with Treelite's words (the reference's
    code) when it cannot read it, with what is wrong when the checks refuse it. Nothing native reads
    the file before its format's checks pass, and nothing runs the forest before the walk of every
    tree passes (XGBoost and LightGBM read the file for their engines after this returns)."""
    passive_openmp()
    tl = import_lazily("treelite", "fil", "fil")
    kind = settings.model_type
    try:
        FILE_CHECKS[kind](path.read_bytes())
    except ModelFileError as e:
        raise UnknownError(f"failed to load '{path}' as model_type '{kind}': {e.what}") from None
    except OSError as e:
        raise UnknownError(f"failed to load '{path}' as model_type '{kind}': {e.strerror or e}") from None
    try:
        if kind == "xgboost":
            model = tl.frontend.load_xgboost_model_legacy_binary(str(path))
        elif kind in ("xgboost_json", "xgboost_ubj"):
            fmt = "json" if kind == "xgboost_json" else "ubjson"
            model = tl.frontend.load_xgboost_model(
                str(path), format_choice=fmt, allow_unknown_field=settings.allow_unknown_field
            )
        elif kind == "lightgbm":
            model = tl.frontend.load_lightgbm_model(str(path))
        else:
            model = tl.Model.deserialize(str(path))
    except Exception as e:
        raise UnknownError(
            f"failed to load '{path}' as model_type '{kind}': {treelite_text(e)}"
            + (
                " (the file is XGBoost's legacy binary format, which XGBoost 3 no longer writes)"
                if kind == "xgboost"
                else ""
            )
        ) from e
    if int(model.get_header_accessor().get_field("num_target")[0]) != 1:
        raise UnknownError(f"failed to load '{path}': Multi-target model not supported")
    try:
        check_forest(model)
    except ModelFileError as e:
        raise UnknownError(f"failed to load '{path}' as model_type '{kind}': {e.what}") from None
    return model


def forest_shape(model: Any) -> ForestShape:
    header = model.get_header_accessor()
    return ForestShape(
        num_feature=int(model.num_feature),
        num_class=int(header.get_field("num_class")[0]),
        num_tree=int(model.num_tree),
    )


# --------------------------------------------------------------------------------------------------
# Engines: (rows, threads) -> scores [rows, num_class] float32


Engine = Callable[[Array, int], Array]


def _gtil(model: Any, num_class: int) -> Engine:
    """GTIL through Treelite's C API (``TreeliteGTILPredict``, a parsed config kept per thread count):
    12 us a row where ``treelite.gtil.predict`` took 69 (it parses its config and asks the model its
    types on every call). ``gtil.predict`` itself where this Treelite lacks what that needs."""
    gtil = import_lazily("treelite.gtil", "fil", "fil")
    try:
        from treelite.core import _LIB, _check_call
        from treelite.gtil.gtil import GTILConfig
    except ImportError:  # pragma: no cover - another Treelite layout: its public predict

        def public(x: Array, threads: int) -> Array:
            out: Array = gtil.predict(model, x, nthread=threads)  # [rows, 1 target, classes]
            return out.reshape(x.shape[0], num_class).astype(np.float32, copy=False)

        return public

    configs: dict[int, Any] = {}
    in_type, in_dtype, out_dtype = model.input_type, np.dtype(model.input_type), np.dtype(model.output_type)
    in_name, handle = in_type.encode(), model.handle

    def run(x: Array, threads: int) -> Array:
        config = configs.get(threads)
        if config is None:
            config = configs.setdefault(threads, GTILConfig(predict_type="default", nthread=threads))
        data = np.ascontiguousarray(x, dtype=in_dtype)  # float64 for a model whose thresholds are
        out = np.zeros((x.shape[0], num_class), dtype=out_dtype)  # [rows, 1 target, classes]
        _check_call(
            _LIB.TreeliteGTILPredict(
                handle,
                data.ctypes.data_as(ctypes.c_void_p),
                in_name,
                ctypes.c_uint64(x.shape[0]),
                out.ctypes.data_as(ctypes.c_void_p),
                config.handle,
            )
        )
        # float64 for a model whose leaves are (scikit-learn's): FIL answers FP32
        return out.astype(np.float32, copy=False)

    return run


def _xgboost_booster(path: Path, threads: int) -> Any:
    """XGBoost's Booster of the file (importing XGBoost, and scikit-learn with it: about a second)."""
    passive_openmp()
    xgb = import_lazily("xgboost", "fil", "fil")
    booster = xgb.Booster(model_file=str(path))
    booster.set_param({"nthread": threads})
    return booster


def _xgboost(booster: Any, num_class: int) -> Engine:
    objective = json.loads(booster.save_config())["learner"]["objective"]["name"]
    margin = objective == "multi:softmax"  # its predict answers labels: the scores are its softmax

    def run(x: Array, _threads: int) -> Array:
        if margin:
            m: Array = booster.inplace_predict(x, predict_type="margin", validate_features=False)
            m = m.reshape(-1, num_class)
            e = np.exp(m - m.max(axis=1, keepdims=True))
            probs: Array = e / e.sum(axis=1, keepdims=True)
            return probs.astype(np.float32, copy=False)
        out: Array = booster.inplace_predict(x, validate_features=False)
        return out.reshape(x.shape[0], num_class)

    return run


def _lightgbm_booster(path: Path) -> Any:
    passive_openmp()
    lgb = import_lazily("lightgbm", "fil", "fil")
    return lgb.Booster(model_file=str(path))


def _lightgbm(booster: Any, num_class: int) -> Engine:
    def run(x: Array, threads: int) -> Array:
        out: Array = booster.predict(x, num_threads=threads)
        return out.reshape(x.shape[0], num_class).astype(np.float32, copy=False)

    return run


XGBOOST_TYPES = ("xgboost_json", "xgboost_ubj")


class Forest:
    """A loaded forest: :meth:`scores` runs a batch on the engine its size calls for,
    :meth:`contributions` its SHAP values.

    A LightGBM model is read by LightGBM before the model is READY (GTIL and LightGBM differ on NaN
    for a model trained with ``zero_as_missing``). XGBoost's engine is loaded in a thread of its own
    once the model's first instance is made (:meth:`attach`), so after every check of the config:
    GTIL answers every call until it is there (they answer alike, NaN included), so importing
    XGBoost (and scikit-learn, which it imports: about a second) does not delay READY, and a model
    refused at load never starts it. When the last instance goes (:meth:`detach`: the model unloaded,
    or its load failed after its instances were made), a loading under way stops at its next step and
    drops what it read. ``native_loaded`` is set once it is there, failed or stopped.

    A model whose config asks for SHAP values (:meth:`load_contributions`) reads its framework's
    engine at load instead: the values are XGBoost's or LightGBM's own (``shap.py``).
    """

    def __init__(self, path: Path, settings: FilSettings, threads: int, model_name: str) -> None:
        self.model = read_treelite(path, settings)
        self.shape = forest_shape(self.model)
        self.path = path
        self.kind = settings.model_type
        self.threads = max(1, threads)
        self.name = model_name
        self._small: Engine = _gtil(self.model, self.shape.num_class)
        self._large: Engine = self._small
        self._contributions: Engine | None = None
        self._booster: Any = None  # the framework's, once read
        self.engine = "treelite-gtil"
        self.native_loaded = threading.Event()
        self._lock = threading.Lock()
        self._users = 0
        self._stopped = threading.Event()
        self._loader: threading.Thread | None = None
        if self.kind == "lightgbm":
            self._load_native()
        elif self.kind not in XGBOOST_TYPES:
            self.native_loaded.set()

    def attach(self) -> None:
        """An instance of the model is made: the first starts XGBoost's engine loading."""
        with self._lock:
            self._users += 1
            if self._loader is None and not self.native_loaded.is_set() and not self._stopped.is_set():
                self._loader = threading.Thread(
                    target=self._load_native, name=f"fil-xgboost-{self.name}", daemon=True
                )
                self._loader.start()

    def detach(self) -> None:
        """An instance is gone: with the last one, no more engine work (:meth:`stop`)."""
        with self._lock:
            self._users -= 1
            last = self._users <= 0
        if last:
            self.stop()

    def stop(self) -> None:
        """No more engine work for this model: a loading not started never starts; one under way
        (an import or a file read cannot be interrupted) drops what it read at its next step."""
        with self._lock:
            self._stopped.set()
            if self._loader is None:
                self.native_loaded.set()

    def _load_native(self) -> None:
        t0 = time.monotonic()
        kind = self.kind
        try:
            if kind == "lightgbm":
                self._booster = _lightgbm_booster(self.path)
                self._large = self._small = _lightgbm(self._booster, self.shape.num_class)
                self.engine = "lightgbm"
                return
            if self._stopped.is_set():  # stopped before this thread ran
                return
            booster = _xgboost_booster(self.path, self.threads)
            if self._stopped.is_set():  # refused or unloaded while XGBoost read it
                log.info("model '%s': XGBoost's engine dropped (the model is gone)", self.name)
                return
            large = _xgboost(booster, self.shape.num_class)
            self._booster, self._large = booster, large
            self.engine = "xgboost+treelite-gtil"
            log.info(
                "model '%s': XGBoost's engine loaded in %.0f ms", self.name, (time.monotonic() - t0) * 1000
            )
        except Exception as e:  # Treelite read it: serve it as the reference does, on GTIL
            log.warning(
                "model '%s': %s could not read '%s' (%s); it runs on Treelite's GTIL, as in the reference",
                self.name,
                kind.split("_")[0],
                self.path.name,
                e,
            )
        finally:
            self.native_loaded.set()

    def load_contributions(self) -> None:
        """The framework's engine, read now (before READY), for SHAP values; UnavailableError when
        the framework cannot read the file (Treelite could)."""
        what = "LightGBM" if self.kind == "lightgbm" else "XGBoost"
        try:
            if self.kind in XGBOOST_TYPES and self._booster is None:
                self._booster = _xgboost_booster(self.path, self.threads)
                self._large = _xgboost(self._booster, self.shape.num_class)
                self.engine = "xgboost+treelite-gtil"
                self.native_loaded.set()  # no thread to start: it is here
            if self._booster is None:
                raise RuntimeError(f"{what} did not read the file")
            self._contributions = contributions(
                self.kind, self._booster, self.shape.num_feature, self.shape.num_class
            )
        except Exception as e:
            raise UnavailableError(
                f"unable to load model '{self.name}': its SHAP values ('treeshap_output') are {what}'s, "
                f"and {what} failed on '{self.path.name}': {treelite_text(e)}"
            ) from e

    def contributions(self, x: Array) -> Array:
        """[rows, num_class * (num_feature + 1)] float32 SHAP values of ``x`` (after
        :meth:`load_contributions`)."""
        assert self._contributions is not None
        try:
            return self._contributions(x, self.threads)
        except Exception as e:
            raise InternalError(f"SHAP values failed: {treelite_text(e)}") from e

    def scores(self, x: Array) -> Array:
        """[rows, num_class] float32 scores of ``x`` ([rows, num_feature] float32)."""
        work = x.shape[0] * self.shape.num_tree
        threads = self.threads if work >= PARALLEL_MIN_WORK else 1
        engine = self._small if work <= GTIL_MAX_WORK else self._large
        try:
            return engine(x, threads)
        except Exception as e:
            raise InternalError(f"prediction failed: {treelite_text(e)}") from e


# --------------------------------------------------------------------------------------------------
# The reference's outputs


def output_width(settings: FilSettings, num_class: int) -> tuple[int, ...]:
    """The values a row the model answers with ``settings`` (the widths output__0 may have)."""
    if settings.predict_proba:
        return (2, 1) if num_class == 1 else (num_class,)
    if settings.output_class:
        return (1,)
    return (num_class,)


def fil_output(scores: Array, settings: FilSettings, width: int) -> Array:
    """output__0 [rows, width] from the scores, as the reference's CPU path makes it."""
    rows, classes = scores.shape
    if settings.predict_proba:
        if classes == 1 and width == 2:
            return np.concatenate((1.0 - scores, scores), axis=1).astype(np.float32, copy=False)
        return scores
    if settings.output_class:
        if classes > 1:
            labels: Array = scores.argmax(axis=1)
            return labels.astype(np.float32).reshape(rows, 1)
        return (scores > np.float32(settings.threshold)).astype(np.float32)
    return scores
