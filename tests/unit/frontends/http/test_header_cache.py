"""The header cache of binary HTTP requests (frontends/http/header_cache.py): a hit must decode to
exactly what the JSON decoder makes of the same body."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from codec_models import ADD_SUB, IDENTITY_BYTES, IDENTITY_FP32, client_body, model
from tritonclient.http import InferenceServerClient, InferInput

from inferd.core.request import SEQUENCE_END, SEQUENCE_START
from inferd.engine.model import Model
from inferd.errors import InferdError, InvalidArgumentError
from inferd.frontends.http.decode import decode_infer_request
from inferd.frontends.http.header_cache import HeaderCache


def _binary_body(values: list[float], **kwargs: Any) -> tuple[bytes, int]:
    arr = np.array(values, dtype=np.float32)
    body, json_size = client_body([("INPUT0", "FP32", arr)], binary=True, **kwargs)
    assert json_size is not None
    return body, json_size


def test_header_cache_hit_reads_the_new_tensor_bytes() -> None:
    cache = HeaderCache()
    body1, hl = _binary_body([1, 2], request_id="r", parameters={"p": 1})
    req1, enc1 = cache.decode(IDENTITY_FP32, "", body1, hl)
    # the header fixes what validation reads (its leading id aside: see the test below)
    assert req1.validation_key == b"{" + body1[:hl].split(b'"r",', 1)[1].lstrip()
    body2, hl2 = _binary_body([3, 4], request_id="r", parameters={"p": 1})
    assert hl2 == hl and body2[:hl] == body1[:hl]
    req2, enc2 = cache.decode(IDENTITY_FP32, "", body2, hl2)
    assert enc2 is enc1 and enc2.default_binary  # the remembered header: no JSON parsed
    assert req2.validation_key == req1.validation_key
    assert req2.inputs["INPUT0"].array.tolist() == [3, 4]
    assert req1.inputs["INPUT0"].array.tolist() == [1, 2]
    assert np.shares_memory(req2.inputs["INPUT0"].array, np.frombuffer(body2, dtype=np.uint8))
    assert (req2.id, req2.parameters, req2.model_name) == ("r", {"p": 1}, "identity_fp32")
    req2.parameters["p"] = 2  # a model's request is its own
    req3, _ = cache.decode(IDENTITY_FP32, "", body1, hl)
    assert req3.parameters == {"p": 1}


def test_header_cache_shares_a_template_between_request_ids() -> None:
    """perf_analyzer sends a new id with each request of a sequence: the header less its leading id
    is the key, and each request keeps its own id; a header without an id, or with an id the cache
    cannot read safely (an escape), never takes another's template."""
    cache = HeaderCache()
    params = {"p": 7}
    body1, hl1 = _binary_body([1, 2], request_id="1001", parameters=params)
    req1, enc1 = cache.decode(IDENTITY_FP32, "", body1, hl1)
    body2, hl2 = _binary_body([3, 4], request_id="1002", parameters=params)
    req2, enc2 = cache.decode(IDENTITY_FP32, "", body2, hl2)
    assert enc2 is enc1  # a hit: no JSON parsed
    assert (req1.id, req2.id) == ("1001", "1002")
    assert req2.validation_key == req1.validation_key and req2.parameters == {"p": 7}
    assert req2.inputs["INPUT0"].array.tolist() == [3, 4]
    body3, hl3 = _binary_body([5, 6], parameters=params)  # no id
    req3, enc3 = cache.decode(IDENTITY_FP32, "", body3, hl3)
    assert enc3 is not enc1 and req3.id == ""
    body4, hl4 = _binary_body([5, 6], request_id='a"b', parameters=params)  # escaped: parsed
    req4, enc4 = cache.decode(IDENTITY_FP32, "", body4, hl4)
    assert enc4 is not enc1 and req4.id == 'a"b'
    raw = b'{"id":"x1","inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1],"parameters":{"binary_data_size":4}}]}'
    for rid in ("x1", "x2"):
        body = raw.replace(b"x1", rid.encode()) + np.float32(1).tobytes()
        req, _ = cache.decode(IDENTITY_FP32, "", body, len(raw))
        assert req.id == rid


def test_header_cache_misses_on_another_tail_length() -> None:
    cache = HeaderCache()
    body, hl = _binary_body([1, 2])
    cache.decode(IDENTITY_FP32, "", body, hl)
    with pytest.raises(InvalidArgumentError, match="expecting 4 additional bytes"):
        cache.decode(IDENTITY_FP32, "", body[:-4], hl)


def test_header_cache_is_per_model_and_version() -> None:
    cache = HeaderCache()
    body, hl = _binary_body([1, 2])
    _, enc = cache.decode(IDENTITY_FP32, "", body, hl)
    other = model("identity_fp32", '{ name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] }')  # a reload
    req, enc_other = cache.decode(other, "", body, hl)
    assert enc_other is not enc
    _, enc_v1 = cache.decode(other, "1", body, hl)
    assert enc_v1 is not enc_other
    assert req.model_version == ""


def test_header_cache_skips_bytes_json_and_raw_requests() -> None:
    cache = HeaderCache()
    strings = np.array([b"a"], dtype=np.object_)
    body, hl = client_body([("INPUT0", "BYTES", strings)], binary=True)
    assert hl is not None
    assert cache.decode(IDENTITY_BYTES, "", body, hl)[0].validation_key is None  # contents matter
    json_body, _ = client_body([("INPUT0", "FP32", np.ones(1, np.float32))], binary=False)
    assert cache.decode(IDENTITY_FP32, "", json_body, None)[0].validation_key is None
    assert cache.decode(IDENTITY_FP32, "", bytes(8), 0)[0].validation_key is None
    mixed = [("INPUT0", "FP32", np.ones(1, np.float32))]
    infer_inputs = [
        InferInput("INPUT0", [1], "FP32").set_data_from_numpy(mixed[0][2], binary_data=False),
        InferInput("INPUT1", [1], "FP32").set_data_from_numpy(mixed[0][2]),
    ]
    mixed_body, mixed_hl = InferenceServerClient.generate_request_body(infer_inputs)
    assert cache.decode(ADD_SUB, "", mixed_body, mixed_hl)[0].validation_key is None


def test_header_cache_bounds() -> None:
    cache = HeaderCache(capacity=2, max_header=10_000)
    bodies = [_binary_body([1, 2], parameters={"p": i}) for i in range(3)]
    first = [cache.decode(IDENTITY_FP32, "", b, hl)[1] for b, hl in bodies]
    assert cache.decode(IDENTITY_FP32, "", *bodies[2])[1] is first[2]
    assert cache.decode(IDENTITY_FP32, "", *bodies[0])[1] is not first[0]  # evicted: the oldest went
    small = HeaderCache(max_header=8)
    body, hl = bodies[0]
    assert small.decode(IDENTITY_FP32, "", body, hl)[0].validation_key is None


# -- sequences: the sequence id is not part of the key -----------------------------------------------

#: perf_analyzer's header (rapidjson, compact, the request parameters right after the id)
PA_HEADER = (
    b'{"id":"<ID>","parameters":{"sequence_id":<N>,"sequence_start":<S>,"sequence_end":<E>},'
    b'"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1],"parameters":{"binary_data_size":4}}],'
    b'"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}'
)


def _body(header: bytes, value: float, **fill: object) -> tuple[bytes, int]:
    for name, v in fill.items():
        header = header.replace(f"<{name}>".encode(), str(v).encode())
    return header + np.float32(value).tobytes(), len(header)


def _fields(decode: Any, m: Model, body: bytes, hl: int) -> tuple[Any, ...]:
    """What a decode made of a body (an error: its type and text), to compare two decoders."""
    try:
        req, enc = decode(m, "", body, hl)
    except InferdError as e:
        return (type(e), e.message)
    outputs = None if req.outputs is None else [o.name for o in req.outputs]
    arrays = {n: t.array.tolist() for n, t in req.inputs.items()}
    fields = (req.id, req.correlation_id, req.flags, req.parameters, req.priority, req.timeout_us)
    return (*fields, arrays, outputs, enc.default_binary, enc.binary)


def _decoder(m: Model, body: bytes, hl: int) -> tuple[Any, ...]:
    return _fields(decode_infer_request, m, body, hl)


def test_perf_analyzer_sequences_share_three_templates() -> None:
    """perf_analyzer gives each sequence a new id: its START, middle and END requests each take
    one template, whatever the sequence, and each request keeps its own id and sequence id."""
    cache = HeaderCache()
    encs: dict[tuple[bool, bool], set[int]] = {}
    n = 0
    for seq in (1, 2, 281474976710656, 9_999_999_999_999_999_999):
        for i in range(20):
            start, end = i == 0, i == 19
            body, hl = _body(PA_HEADER, n, ID=n, N=seq, S=str(start).lower(), E=str(end).lower())
            req, enc = cache.decode(IDENTITY_FP32, "", body, hl)
            assert _fields(cache.decode, IDENTITY_FP32, body, hl) == _decoder(IDENTITY_FP32, body, hl)
            assert (req.id, req.correlation_id) == (str(n), seq)
            assert req.flags == (SEQUENCE_START if start else 0) | (SEQUENCE_END if end else 0)
            assert req.inputs["INPUT0"].array.tolist() == [n]
            encs.setdefault((start, end), set()).add(id(enc))
            n += 1
    assert {k: len(v) for k, v in encs.items()} == {(True, False): 1, (False, False): 1, (False, True): 1}


def test_tritonclient_sequences_share_a_template() -> None:
    """tritonclient puts the request parameters last, compact; json.dumps's ", " and ": " too."""
    cache = HeaderCache()
    got = []
    for seq in (5, 6, 123456):
        body, hl = _binary_body([seq], request_id="r", sequence_id=seq, sequence_start=True)
        assert b'"parameters":{"sequence_id":%d,' % seq in body[:hl] and body[:hl].endswith(b"}}")
        req, enc = cache.decode(IDENTITY_FP32, "", body, hl)
        assert _fields(cache.decode, IDENTITY_FP32, body, hl) == _decoder(IDENTITY_FP32, body, hl)
        assert (req.correlation_id, req.flags) == (seq, SEQUENCE_START)
        got.append(enc)
    assert got[1] is got[0] and got[2] is got[0]
    spaced = []
    for seq in (5, 6):
        head = json.dumps(
            {
                "id": "r",
                "inputs": [
                    {
                        "name": "INPUT0",
                        "datatype": "FP32",
                        "shape": [1],
                        "parameters": {"binary_data_size": 4},
                    }
                ],
                "parameters": {"sequence_id": seq, "sequence_end": True, "binary_data_output": True},
            }
        ).encode()
        assert head.endswith(
            b'"parameters": {"sequence_id": %d, "sequence_end": true, ' % seq
            + b'"binary_data_output": true}}'
        )
        body = head + np.float32(seq).tobytes()
        req, enc = cache.decode(IDENTITY_FP32, "", body, len(head))
        assert _fields(cache.decode, IDENTITY_FP32, body, len(head)) == _decoder(
            IDENTITY_FP32, body, len(head)
        )
        assert (req.correlation_id, req.flags) == (seq, SEQUENCE_END)
        spaced.append(enc)
    assert spaced[1] is spaced[0] is not got[0]
    str_body, str_hl = _binary_body([1], sequence_id="s7", sequence_start=True)  # a string id: its own key
    req, enc = cache.decode(IDENTITY_FP32, "", str_body, str_hl)
    assert enc is not got[0] and req.correlation_id == "s7"


#: headers whose number at <N> may not be the request's sequence id (or is, in an odd place): each
#: decoded through the cache with the numbers 3 (the other sequence id most of them hold), 9, 3, 5 in
#: turn must give what the JSON decoder gives
ODD_HEADERS = {
    "in an input's parameters": (
        b'{"id":"<ID>","inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1],'
        b'"parameters":{"sequence_id":<N>,"binary_data_size":4}}],"parameters":{"sequence_id":3}}'
    ),
    "an input's parameters last": (
        b'{"id":"<ID>","parameters":{"sequence_id":3},"inputs":[{"name":"INPUT0","datatype":"FP32",'
        b'"shape":[1],"parameters":{"binary_data_size":4,"x":{"parameters":{"sequence_id":<N>}}}}]}'
    ),
    "an object's parameters last": (
        b'{"id":"<ID>","parameters":{"sequence_id":3},"inputs":[{"name":"INPUT0","datatype":"FP32",'
        b'"shape":[1],"parameters":{"binary_data_size":4}}],"x":{"parameters":{"sequence_id":<N>}}}'
    ),
    "not the last member": (
        b'{"id":"<ID>","x":{"parameters":{"sequence_id":<N>}},"inputs":[{"name":"INPUT0",'
        b'"datatype":"FP32","shape":[1],"parameters":{"binary_data_size":4}}],"parameters":{"sequence_id":3}}'
    ),
    "a later duplicate": PA_HEADER[:-1] + b',"parameters":{"sequence_id":3}}',
    "an earlier duplicate": PA_HEADER.replace(b"<N>", b"3")[:-1] + b',"parameters":{"sequence_id":<N>}}',
    "a later escaped key": PA_HEADER[:-1] + b',"parameters":{"sequence\\u005fid":3}}',
    "a later spaced key": PA_HEADER[:-1] + b',"parameters":{"sequence_id" : 3}}',
    "the request's, a nested member after it": (
        b'{"id":"<ID>","inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1],'
        b'"parameters":{"binary_data_size":4}}],"parameters":{"sequence_id":<N>,"x":{"y":1}}}'
    ),
}


@pytest.mark.parametrize("header", list(ODD_HEADERS.values()), ids=list(ODD_HEADERS))
def test_a_sequence_id_in_an_odd_place_decodes_as_the_decoder_reads_it(header: bytes) -> None:
    cache = HeaderCache()
    for i, seq in enumerate((3, 9, 3, 5)):
        body, hl = _body(header, i, ID=i, N=seq, S="true", E="false")
        assert _fields(cache.decode, IDENTITY_FP32, body, hl) == _decoder(IDENTITY_FP32, body, hl)


@pytest.mark.parametrize(
    "number",
    ["05", "0", "-5", "5.0", "5e0", "5E+0", "10000000000000000000", "18446744073709551616", "1" * 25],
)
def test_a_number_the_decoder_reads_otherwise_is_parsed(number: str) -> None:
    """After a plain number's template: a spelling that is no uint64 of up to 19 digits is parsed
    (an error, another value), never taken for a hit."""
    cache = HeaderCache()
    for i, seq in enumerate(("5", number)):
        body, hl = _body(PA_HEADER, i, ID=i, N=seq, S="false", E="false")
        assert _fields(cache.decode, IDENTITY_FP32, body, hl) == _decoder(IDENTITY_FP32, body, hl)
