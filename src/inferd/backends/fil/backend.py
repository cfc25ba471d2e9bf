"""The fil backend: tree models served as Triton's FIL backend serves them, on CPU (``KIND_CPU``).

``backend: "fil"`` with the FIL backend's repositories as they are: ``model_type`` ``xgboost``
(XGBoost's legacy binary ``xgboost.model``), ``xgboost_json`` (``xgboost.json``), ``xgboost_ubj``
(``xgboost.ubj``), ``lightgbm`` (``model.txt``) or ``treelite_checkpoint`` (``checkpoint.tl``:
scikit-learn's and cuML's forests as the FIL backend takes them), read from the version folder, or
from ``default_model_filename``. One input, ``input__0`` [rows, features] FP32; the output
``output__0`` FP32 (``params.py`` reads the parameters that shape it) and, when the config lists it,
``treeshap_output``: SHAP values, the frameworks' own (``shap.py``). The behaviour comes from the
FIL backend's source (Triton 24.10, the reference's release, and RAPIDS-Triton), since the
reference installed here has only the Python backend: its outputs' shape drops every dimension of 1
after the batch (``output__0`` with dims [1] answers [rows]), a binary classifier's
``predict_proba`` answers [1 - p, p] when dims are [2] and p when they are [1].

The reference checks nothing of the config against the model; here a config that could only
answer wrongly is refused at load, naming what to change: another input or output name, a feature
count other than the model's (the reference reads rows at the wrong stride), an output width other
than what the parameters give, a datatype other than FP32, ``treeshap_output`` with dims other than
the model's or for a model type no framework here computes SHAP values for.

The FIL backend completes no config (RAPIDS-Triton never sets one). inferd completes a config that
lists no inputs or outputs from the model file (``input__0`` [features], ``output__0`` as the
parameters shape it, ``max_batch_size`` and dynamic batching as for ONNX Runtime): the reference
loads such a config and fails every request.

Instances share the model version's forest (``engine.py``: the engine each call runs on); each
executes in its worker thread, the frameworks releasing the GIL. The first instance starts the
loading of XGBoost's engine and the last one gone stops it, so a model refused at load, or failing
after its instances were made, leaves no engine work running. Threads: ``cpu_nthread``, else
the cores shared among the instances (``native.default_intra_op_threads``).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.batched import BatchedInstance
from inferd.backends.fil.engine import (
    Forest,
    fil_output,
    forest_shape,
    output_width,
    passive_openmp,
    read_treelite,
)
from inferd.backends.fil.params import MODEL_FILES, FilSettings, fil_settings, ignored
from inferd.backends.fil.shap import SHAP_MODEL_TYPES, SHAP_OUTPUT, shap_width
from inferd.backends.native import (
    NativeBackend,
    NativeModel,
    available_cpus,
    default_intra_op_threads,
    import_lazily,
)
from inferd.backends.signature import GraphTensor, shape_text
from inferd.core.request import InferRequest
from inferd.core.tensor import Tensor, TensorSpec
from inferd.core.types import DataType
from inferd.errors import InvalidArgumentError, UnavailableError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig, ModelInput, ModelOutput

log = logging.getLogger("inferd.backends.fil")

INPUT = "input__0"
OUTPUT = "output__0"

Array = np.ndarray[Any, Any]


def model_path(config: ModelConfig, version_dir: Path) -> Path:
    """The reference's ``model_file()``: ``default_model_filename`` in the version folder, or the
    version folder itself; a folder holds the ``model_type``'s file."""
    kind = fil_settings(config).model_type
    path = version_dir / config.default_model_filename if config.default_model_filename else version_dir
    if path.is_dir():
        path = path / MODEL_FILES[kind]
    if path.is_file():
        return path
    others = sorted(
        f"'{name}' (model_type '{t}')" for t, name in MODEL_FILES.items() if (path.parent / name).is_file()
    )
    hint = f"; the folder holds {', '.join(others)}" if others else ""
    raise UnavailableError(
        f"unable to find '{path}' for model '{config.name}': model_type '{kind}' reads "
        f"'{MODEL_FILES[kind]}' from the version folder, or the file default_model_filename names{hint}"
    )


def _refuse(config: ModelConfig, what: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"unable to load model '{config.name}': {what}")


def _one_tensor(
    config: ModelConfig, listed: Sequence[ModelInput] | Sequence[ModelOutput], kind: str, name: str
) -> ModelInput | ModelOutput:
    found = [t for t in listed if t.name == name]
    if not found:
        names = ", ".join(f"'{t.name}'" for t in listed) or "none"
        raise _refuse(
            config,
            f"the fil backend {'reads' if kind == 'input' else 'answers'} {kind} '{name}' (the FIL backend's "
            "name), but the model configuration "
            f"lists {names}: name it '{name}'",
        )
    if found[0].HasField("reshape"):
        raise _refuse(config, f"{kind} '{name}' has a reshape, which the fil backend does not serve")
    return found[0]


def _row_dims(config: ModelConfig, io: ModelInput | ModelOutput) -> list[int]:
    """The dims of one row: the config's dims, less the rows' dimension when the model does not batch."""
    dims = [int(d) for d in io.dims]
    if config.max_batch_size > 0:
        return dims
    if len(dims) < 2 and io.name == INPUT:
        raise _refuse(
            config,
            f"input '{INPUT}' has dims {shape_text(dims)}: with max_batch_size 0 they are [rows, features]",
        )
    return dims[1:]


@dataclass(frozen=True, slots=True)
class Outputs:
    """What the config's outputs are, checked against the model: ``output__0``'s values a row and its
    dims after the rows (those of 1 dropped as the reference drops them), ``treeshap_output``'s dims
    (None when the config does not list it)."""

    width: int
    dims: tuple[int, ...]
    shap_dims: tuple[int, ...] | None


def check_config(config: ModelConfig, settings: FilSettings, num_feature: int, num_class: int) -> Outputs:
    """The config against the model; InvalidArgumentError naming what to change."""
    if len(config.input) != 1:
        names = ", ".join(f"'{t.name}'" for t in config.input) or "none"
        raise _refuse(
            config, f"the fil backend reads one input, '{INPUT}'; the model configuration lists {names}"
        )
    row = _row_dims(config, _one_tensor(config, config.input, "input", INPUT))
    if len(row) != 1 or row[0] not in (-1, num_feature):
        raise _refuse(
            config,
            f"input '{INPUT}' has dims {shape_text(row)} a row in the model configuration, but the model "
            f"reads {num_feature} feature(s) a row: set its dims to [ {num_feature} ]",
        )
    for o in config.output:
        if o.name not in (OUTPUT, SHAP_OUTPUT):
            raise _refuse(
                config, f"the fil backend answers output '{OUTPUT}' and '{SHAP_OUTPUT}' only, not '{o.name}'"
            )
    out = _row_dims(config, _one_tensor(config, config.output, "output", OUTPUT))
    widths = output_width(settings, num_class)
    width = math.prod(out) if all(d > 0 for d in out) else -1
    if width not in widths:
        say = " or ".join(f"[ {w} ]" for w in widths)
        raise _refuse(
            config,
            f"output '{OUTPUT}' has dims {shape_text(out)} a row, but this model answers {widths[0]} value(s) "
            f"a row with predict_proba {str(settings.predict_proba).lower()} and output_class "
            f"{str(settings.output_class).lower()} ({num_class} class score(s)): set its dims to {say}",
        )
    shap = None
    if any(o.name == SHAP_OUTPUT for o in config.output):
        shap = _check_shap(config, settings, num_feature, num_class)
    return Outputs(width, tuple(d for d in out if d != 1), shap)


def _check_shap(
    config: ModelConfig, settings: FilSettings, num_feature: int, num_class: int
) -> tuple[int, ...]:
    """``treeshap_output``'s dims after the rows, those of 1 dropped (``shap.py``)."""
    kind = settings.model_type
    if kind not in SHAP_MODEL_TYPES:
        raise _refuse(
            config,
            f"output '{SHAP_OUTPUT}' (SHAP values) is computed here by XGBoost or LightGBM, which read "
            f"model_type {', '.join(SHAP_MODEL_TYPES)}, not '{kind}' (Treelite computes none): remove the "
            "output"
            + (
                ", or save the model as XGBoost's JSON (model_type xgboost_json)" if kind == "xgboost" else ""
            ),
        )
    row = _row_dims(config, _one_tensor(config, config.output, "output", SHAP_OUTPUT))
    want = shap_width(num_feature, num_class)
    if not all(d > 0 for d in row) or math.prod(row) != want:
        say = f"[ {num_feature + 1} ]" if num_class == 1 else f"[ {num_class}, {num_feature + 1} ]"
        raise _refuse(
            config,
            f"output '{SHAP_OUTPUT}' has dims {shape_text(row)} a row, but this model answers {want} SHAP "
            f"value(s) a row ({num_class} class score(s) of {num_feature} feature(s) and the bias): set "
            f"its dims to {say}",
        )
    return tuple(d for d in row if d != 1)


class FilModel(NativeModel):
    """A loaded FIL model version: its forest, shared by its instances."""

    find = staticmethod(model_path)

    def import_framework(self) -> None:
        passive_openmp()
        import_lazily("treelite", "fil", "fil")

    def unserved(self, datatype: DataType) -> str | None:
        if datatype.wire == "FP32":
            return None
        return f"is {datatype.config}, which the fil backend does not serve: FIL reads and writes TYPE_FP32"

    def __init__(self, ctx: LoadContext) -> None:
        super().__init__(ctx)
        config = ctx.config
        self.settings = fil_settings(config)
        skipped = ignored(config)
        if skipped:
            log.warning(
                "model '%s': parameter(s) %s change nothing on CPU (GPU execution, or the FIL backend's "
                "other CPU engine): ignored",
                self.name,
                ", ".join(skipped),
            )
        self.threads = self.settings.cpu_nthread or default_intra_op_threads(
            available_cpus(), self.instance_count
        )
        t0 = time.monotonic()
        self.forest = Forest(self.path, self.settings, self.threads, self.name)
        shape = self.forest.shape
        self.outputs_checked = check_config(config, self.settings, shape.num_feature, shape.num_class)
        if self.outputs_checked.shap_dims is not None:
            self.forest.load_contributions()
        log.info(
            "model '%s' version %s: %s, %d tree(s), %d feature(s), %d class score(s); engine %s, "
            "%d thread(s) an instance; read in %.0f ms",
            self.name,
            self.version_str,
            self.path.name,
            shape.num_tree,
            shape.num_feature,
            shape.num_class,
            self.forest.engine if self.forest.native_loaded.is_set() else "treelite-gtil (XGBoost's loading)",
            self.threads,
            (time.monotonic() - t0) * 1000,
        )

    def create_instance(self, spec: InstanceSpec) -> FilInstance:
        if spec.kind == "GPU":
            raise UnavailableError(
                f"unable to load model '{self.name}': instance '{spec.name}' is KIND_GPU, but the fil backend "
                "runs on the CPU: use instance_group [ { kind: KIND_CPU } ] (or KIND_AUTO)"
            )
        return FilInstance(self, spec.name)

    def unload(self) -> None:
        """No more engine work (a loading of XGBoost's under way stops); the forest goes with the model."""
        self.forest.stop()


class FilBackend(NativeBackend):
    """Backend ``fil``: XGBoost, LightGBM and Treelite forests (scikit-learn's through checkpoints)."""

    name = "fil"
    model_type = FilModel

    def gpu_available(self) -> bool:
        """False: this fil backend runs on the CPU, so ``KIND_AUTO`` is ``KIND_CPU`` (the reference's
        FIL backend would run on the GPU)."""
        return False

    def signature(
        self, config: ModelConfig, version_dir: Path
    ) -> tuple[list[GraphTensor], list[GraphTensor]]:
        """``input__0`` [-1, features] and ``output__0`` [-1, values a row], from the model file."""
        settings = fil_settings(config)
        shape = forest_shape(read_treelite(model_path(config, version_dir), settings))
        width = output_width(settings, shape.num_class)[0]
        return (
            [GraphTensor(INPUT, "TYPE_FP32", (-1, shape.num_feature))],
            [GraphTensor(OUTPUT, "TYPE_FP32", (-1, width))],
        )


class FilInstance(BatchedInstance):
    """An instance: the requests' rows stacked, scored once, the answers cut back per request."""

    #: a few rows run in tens of microseconds: the pool may run them on the loop (it measures)
    inline_ok = True
    model: FilModel

    def __init__(self, model: FilModel, name: str) -> None:
        super().__init__(model, name)
        self._input = model.inputs[0]
        self._output = next(o for o in model.outputs if o.name == OUTPUT)
        self._shap = next((o for o in model.outputs if o.name == SHAP_OUTPUT), None)
        # a SHAP call costs hundreds of times a score's (a row of 6,000 trees: tens of ms): never on
        # the loop, where small score-only calls would otherwise have put the model
        self.inline_ok = self._shap is None
        self._features = model.forest.shape.num_feature
        self._attached = True
        model.forest.attach()  # the first instance starts XGBoost's engine loading

    def _group_inputs(self, requests: list[InferRequest], wanted: list[frozenset[str]]) -> tuple[Array, bool]:
        """The rows, and whether a request asked for the SHAP values (they cost far more than scores)."""
        arr = self._stacked(requests, self._input)
        assert arr is not None  # input__0 is not optional: the core has checked it came
        if arr.ndim != 2 or arr.shape[1] != self._features:
            raise InvalidArgumentError(
                f"input '{INPUT}' has shape {list(arr.shape)}, but model '{self.model.name}' reads "
                f"[rows, {self._features}]"
            )
        if arr.dtype != np.float32 or not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr, dtype=np.float32)
        return arr, self._shap is not None and any(SHAP_OUTPUT in w for w in wanted)

    def _group_run(self, prepared: tuple[Array, bool]) -> list[tuple[TensorSpec, Array]]:
        x, shap = prepared
        model, checked = self.model, self.model.outputs_checked
        out = fil_output(model.forest.scores(x), model.settings, checked.width)
        results = [(self._output, out.reshape((x.shape[0], *checked.dims)))]
        if shap and self._shap is not None and checked.shap_dims is not None:
            values = model.forest.contributions(x)
            results.append((self._shap, values.reshape((x.shape[0], *checked.shap_dims))))
        return results

    def _group_outputs(
        self,
        requests: list[InferRequest],
        result: list[tuple[TensorSpec, Array]],
        wanted: list[frozenset[str]],
    ) -> list[list[Tensor]]:
        return self._split_outputs(requests, result, wanted)

    def unload(self) -> None:
        """The forest is the model's: the last instance gone stops its engine work (a failed load's)."""
        if self._attached:
            self._attached = False
            self.model.forest.detach()
