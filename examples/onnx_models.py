"""The example zoo's ONNX models written offline with ``onnx.helper`` (nothing is downloaded), with seeded
weights so that every build answers the same.

- ``tiny_mlp``: a 4 -> 16 -> 3 perceptron with a softmax; it has no config.pbtxt: inferd completes it
  from the graph (``max_batch_size`` 4, dynamic batching).
- ``densenet_onnx``: the Triton quickstart model. The ``onnx`` wheel ships DenseNet-121's graph
  (``onnx/backend/test/data/light/light_densenet121.onnx``: ``data_0`` [1,3,224,224] to ``fc6_1``
  [1,1000,1,1]) with every weight replaced by a constant; here the weights are drawn from a seeded
  generator instead. The classes are therefore arbitrary (``class_000`` ...), but the model computes
  what DenseNet-121 computes, at its cost.
- ``signal_smoother``: a stateful model (sequence batching, implicit state): a signal streamed in
  chunks of any length, one sequence per signal (``sequence_id``, START on the first chunk, END on the
  last). Per sample it returns the exponential moving average (``SMOOTHED``, alpha 0.8, starting at the
  signal's first sample) and the mean so far (``RUNNING_MEAN``). Between chunks the server keeps its
  state (``EMA``: the last average; ``TOTALS``: sum and count), so the chunks' answers equal the answer
  to the whole signal sent at once. An ONNX ``Scan`` over the chunk; the ``START`` control tells it
  where a signal begins.

Needs the ``onnx`` package (``pip install -e '.[examples]'``); examples/build_models.py writes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

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


def tiny_mlp_model(seed: int = SEED) -> Any:
    """The tiny_mlp graph: INPUT0 [N,4] -> Gemm -> Relu -> Gemm -> Softmax -> OUTPUT0 [N,3]."""
    import onnx
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
    """What tiny_mlp computes, in numpy (for tests and the docs)."""
    from onnx import numpy_helper

    init = {t.name: numpy_helper.to_array(t) for t in tiny_mlp_model(seed).graph.initializer}
    h = np.maximum(x @ init["W1"] + init["B1"], 0)
    logits = h @ init["W2"] + init["B2"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    out: np.ndarray[Any, Any] = (e / e.sum(axis=1, keepdims=True)).astype(np.float32)
    return out


def densenet_graph_path() -> Path:
    """DenseNet-121's graph as the onnx wheel ships it (weights replaced by constants)."""
    import onnx

    path = Path(onnx.__file__).parent / "backend/test/data/light/light_densenet121.onnx"
    if not path.is_file():
        raise SystemExit(f"the installed onnx wheel has no {path.name} (looked in {path.parent})")
    return path


def densenet_model(seed: int = SEED) -> Any:
    """DenseNet-121 with seeded weights in place of the wheel's constants."""
    import onnx
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
    import onnx

    (dest / "1").mkdir(parents=True)
    onnx.save(tiny_mlp_model(), str(dest / "1" / "model.onnx"))


def write_densenet(dest: Path) -> None:
    import onnx

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
    import onnx
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
    import onnx

    (dest / "1").mkdir(parents=True)
    onnx.save(signal_smoother_model(), str(dest / "1" / "model.onnx"))
    (dest / "config.pbtxt").write_text(SIGNAL_SMOOTHER_CONFIG)
