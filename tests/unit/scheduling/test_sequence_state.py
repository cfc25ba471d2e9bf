"""Control tensors and implicit state, as the sequence batcher makes them (no instance needed)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from seqkit import CONTROLS, STATE, config, req

from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor, serialize_bytes
from inferd.core.types import BY_WIRE
from inferd.errors import InvalidArgumentError
from inferd.scheduling.sequence_state import (
    SequenceControls,
    SequenceStates,
    filler,
    state_specs,
    take_states,
)


def _corrid(data_type: str) -> str:
    return f'control_input [ {{ name: "C" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {data_type} }} ] }} ]'


def test_controls_have_the_model_shape_and_values() -> None:
    controls = SequenceControls(config(mbs=4))
    got = controls.for_request(req(12, 0, start=True, end=True, mbs=4))
    assert {n: (t.shape, t.array.dtype.name, t.array.reshape(-1)[0]) for n, t in got.items()} == {
        "START": ((1, 1), "int32", 1),
        "END": ((1, 1), "float32", 1.0),
        "READY": ((1, 1), "bool", True),
        "CORRID": ((1, 1), "uint64", 12),
    }
    assert not got["START"].array.flags.writeable  # shared by every request: read-only
    filled = SequenceControls(config()).for_filler()
    assert {n: t.array.tolist() for n, t in filled.items()} == {
        "START": [0],
        "END": [0.0],
        "READY": [False],
        "CORRID": [0],
    }


@pytest.mark.parametrize(
    ("data_type", "cid", "expected"),
    [
        ("TYPE_UINT64", 2**64 - 1, 2**64 - 1),
        ("TYPE_INT64", 2**64 - 1, -1),  # the ID's 64 bits, read as the control's type
        ("TYPE_INT32", 2**32 + 5, 5),  # truncated to the control's size
        ("TYPE_UINT32", 7, 7),
        # a string ID in a numeric control: the reference's layout (length, then the first bytes)
        ("TYPE_UINT64", "ab", struct.unpack("<Q", struct.pack("<I", 2) + b"ab\0\0")[0]),
        ("TYPE_INT32", "abc", 3),
        ("TYPE_STRING", "abc", b"abc"),
        ("TYPE_STRING", 42, b"42"),
    ],
)
def test_the_corrid_control(data_type: str, cid: int | str, expected: int | bytes) -> None:
    controls = SequenceControls(config(sequence=_corrid(data_type)))
    tensor = controls.for_request(req(cid, 0))["C"]
    assert tensor.datatype is BY_WIRE[data_type.removeprefix("TYPE_").replace("STRING", "BYTES")]
    assert tensor.array.reshape(-1)[0] == expected


def test_states_start_from_zeros_or_the_initial_state(tmp_path: Path) -> None:
    sequence = (
        CONTROLS
        + """
  state [
    { input_name: "A" output_name: "A_OUT" data_type: TYPE_FP32 dims: [ -1, 2 ] },
    { input_name: "B" output_name: "B_OUT" data_type: TYPE_INT32 dims: [ 3 ]
      initial_state { data_type: TYPE_INT32 dims: [ 3 ] name: "b" data_file: "b.bin" } },
    { input_name: "C" output_name: "C_OUT" data_type: TYPE_INT32 dims: [ 2 ]
      initial_state { data_type: TYPE_INT32 dims: [ 2 ] name: "c" zero_data: true } },
    { input_name: "S" output_name: "S_OUT" data_type: TYPE_STRING dims: [ 2 ] }
  ]"""
    )
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "b.bin").write_bytes(np.array([4, 5, 6], dtype=np.int32).tobytes())
    specs = state_specs(config(mbs=2, sequence=sequence), tmp_path)
    initial = {s.input_name: s.initial for s in specs}
    assert initial["A"].shape == (1, 1, 2) and initial["A"].dtype == np.float32 and not initial["A"].any()
    assert initial["B"].tolist() == [[4, 5, 6]]
    assert initial["C"].tolist() == [[0, 0]]
    assert initial["S"].tolist() == [[b"", b""]]
    assert state_specs(config(sequence=CONTROLS + STATE), None)[0].initial.shape == (1,)


def _state(initial: str, dims: str = "[ 2 ]") -> str:
    return f"""state [ {{ input_name: "X" output_name: "Y" data_type: TYPE_INT32 dims: {dims}
      {initial} }} ]"""


@pytest.mark.parametrize(
    ("sequence", "message"),
    [
        (
            _state('initial_state { data_type: TYPE_FP32 dims: [ 2 ] name: "i" zero_data: true }'),
            "The data type used for 'initial_state' field of state 'X' does not match the state data type.",
        ),
        (
            _state("initial_state { data_type: TYPE_INT32 dims: [ 2 ] zero_data: true }"),
            "Field 'name' must be set when using initial_state for state input 'X'.",
        ),
        (
            _state('initial_state { data_type: TYPE_INT32 dims: [ 2, 1 ] name: "i" zero_data: true }'),
            "Number of dimensions in 'initial_state' doesn't match the size of 'state' dimensions for state "
            "input 'X'. 2 != 1",
        ),
        (
            _state(
                'initial_state { data_type: TYPE_INT32 dims: [ -1 ] name: "i" zero_data: true }', "[ -1 ]"
            ),
            "'initial_state' field for state input name 'X' contains variable dimensions.",
        ),
        (
            _state('initial_state { data_type: TYPE_INT32 dims: [ 3 ] name: "i" zero_data: true }'),
            "'initial_state' dim for input name 'X' doesn't match 'state' dim description. 3 != 2",
        ),
        (
            _state('initial_state { data_type: TYPE_INT32 dims: [ 2 ] name: "i" data_file: "short.bin" }'),
            "initial_state setting expects 8 bytes, but the data provided from short.binonly has 4 bytes.",
        ),
        (
            _state('initial_state { data_type: TYPE_INT32 dims: [ 2 ] name: "i" }'),
            "initial_state setting expects state'X' to have state_data set",
        ),
        (
            _state(
                'initial_state { data_type: TYPE_INT32 dims: [ 2 ] name: "i" zero_data: true } '
                'initial_state { data_type: TYPE_INT32 dims: [ 2 ] name: "j" zero_data: true }'
            ),
            "initial_state field for state input 'X' must contain exactly one or zero element. Found '2' elements.",
        ),
    ],
)
def test_a_bad_initial_state_has_the_reference_text(tmp_path: Path, sequence: str, message: str) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "short.bin").write_bytes(b"\0" * 4)
    with pytest.raises(InvalidArgumentError) as e:
        state_specs(config(sequence=sequence), tmp_path)
    assert e.value.message == message


def test_a_string_state_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "initial_state").mkdir()
    (tmp_path / "initial_state" / "s.bin").write_bytes(serialize_bytes([b"hi", b"there"]))
    sequence = """state [ { input_name: "X" output_name: "Y" data_type: TYPE_STRING dims: [ 2 ]
      initial_state { data_type: TYPE_STRING dims: [ 2 ] name: "s" data_file: "s.bin" } } ]"""
    assert state_specs(config(sequence=sequence), tmp_path)[0].initial.tolist() == [b"hi", b"there"]


def test_take_states_moves_the_state_outputs_out_of_the_response() -> None:
    specs = state_specs(config(sequence=CONTROLS + STATE), None)
    states = SequenceStates(specs)
    int32 = BY_WIRE["INT32"]
    batch = np.array([[3], [4]], dtype=np.int32)
    response = InferResponse(
        "seq",
        "1",
        outputs=[
            Tensor("OUT", int32, (1,), array=np.array([3], dtype=np.int32)),
            Tensor("STATE_OUT", int32, (1,), array=batch[0]),  # a view over a batch's output
        ],
    )
    take_states(response, specs, states)
    assert [t.name for t in response.outputs] == ["OUT"]
    kept = states.current["STATE_IN"]
    assert kept.name == "STATE_IN" and kept.array.tolist() == [3]
    batch[0] = 99  # the batch's array is reused: the state is a copy
    assert kept.array.tolist() == [3]
    states.reset(specs)
    assert states.current["STATE_IN"].array.tolist() == [0]


def test_a_filler_copies_the_shapes_with_zeros() -> None:
    controls = SequenceControls(config(mbs=2))
    real = req(5, 7, start=True, mbs=2)
    real.inputs["S"] = Tensor("S", BY_WIRE["BYTES"], (1, 1), array=np.array([[b"x"]], dtype=np.object_))
    real.inputs.update(controls.for_request(real))
    f = filler(real, controls.for_filler())
    assert f.correlation_id == 0 and f.flags == 0 and f.stream is None and f.batch_size == 1
    assert f.inputs["IN"].array.tolist() == [[0]] and f.inputs["S"].array.tolist() == [[b""]]
    assert f.inputs["READY"].array.tolist() == [[False]] and f.inputs["CORRID"].array.tolist() == [[0]]
