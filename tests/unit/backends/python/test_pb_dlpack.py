"""pb_utils.Tensor and DLPack: capsules, read-only inputs, BF16, memory sharing and lifetime."""

from __future__ import annotations

import ctypes
import gc
import textwrap
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.python import pb_utils
from inferd.backends.python.backend import PythonBackend, PythonInstance
from inferd.core.request import InferRequest
from inferd.core.tensor import Tensor as CoreTensor
from inferd.core.types import BF16, BY_WIRE, DataType
from inferd.repository import load_model_config, normalize_config

# every datatype DLPack can carry (BYTES cannot), as numpy dtype or as BF16 over uint16 words
NUMERIC = [w for w in BY_WIRE if w not in ("BYTES", "BF16")]
#: (DLDataType code, bits) each datatype must be exported as
DL_TYPES = {
    "BOOL": (6, 8), "UINT8": (1, 8), "UINT16": (1, 16), "UINT32": (1, 32), "UINT64": (1, 64),
    "INT8": (0, 8), "INT16": (0, 16), "INT32": (0, 32), "INT64": (0, 64),
    "FP16": (2, 16), "FP32": (2, 32), "FP64": (2, 64), "BF16": (4, 16),
}  # fmt: skip


# the dlpack.h ABI, written out independently of pb_utils
class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("ndim", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi)
)


def dl_tensor(capsule: Any) -> DLTensor:
    """The DLTensor inside a legacy ``"dltensor"`` capsule."""
    assert _capsule_name(capsule) == b"dltensor"
    t: DLTensor = DLManagedTensor.from_address(_capsule_pointer(capsule, b"dltensor")).dl_tensor
    return t


def sample(wire: str, shape: tuple[int, ...] = (2, 3)) -> np.ndarray[Any, Any]:
    n = int(np.prod(shape))
    if wire == "BOOL":
        return np.asarray(np.arange(n) % 3 == 0).reshape(shape)
    if wire == "BF16":
        return bf16_words(np.linspace(-2.5, 3.0, n, dtype=np.float32)).reshape(shape)
    return np.arange(1, n + 1).astype(BY_WIRE[wire].numpy).reshape(shape)


def bf16_words(f: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    return (f.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def read_only(arr: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``arr`` as a request input is: a view over received (immutable) bytes."""
    return np.frombuffer(arr.tobytes(), dtype=arr.dtype).reshape(arr.shape)


def pb_tensor(name: str, wire: str, arr: np.ndarray[Any, Any]) -> pb_utils.Tensor:
    if wire == "BF16":
        return pb_utils.Tensor._typed(name, arr, BF16)
    return pb_utils.Tensor(name, arr)


def collect() -> None:
    for _ in range(2):
        gc.collect()


# -- export ------------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", [*NUMERIC, "BF16"])
@pytest.mark.parametrize("writable", [True, False], ids=["writable", "read-only"])
def test_to_dlpack_is_a_dltensor_capsule_over_the_same_memory(wire: str, writable: bool) -> None:
    arr = sample(wire)
    if not writable:
        arr = read_only(arr)
    capsule = pb_tensor("X", wire, arr).to_dlpack()
    t = dl_tensor(capsule)
    assert (t.device_type, t.device_id) == (1, 0)  # kDLCPU
    assert (t.code, t.bits, t.lanes) == (*DL_TYPES[wire], 1)
    assert [t.shape[i] for i in range(t.ndim)] == [2, 3]
    assert t.data + t.byte_offset == arr.ctypes.data  # no copy


@pytest.mark.parametrize("wire", [*NUMERIC, "BF16"])
@pytest.mark.parametrize("writable", [True, False], ids=["writable", "read-only"])
@pytest.mark.parametrize("via", ["capsule", "object"])
def test_round_trip_of_every_datatype(wire: str, writable: bool, via: str) -> None:
    arr = sample(wire)
    if not writable:
        arr = read_only(arr)
    src = pb_tensor("X", wire, arr)
    back = pb_utils.Tensor.from_dlpack("Y", src.to_dlpack() if via == "capsule" else src)
    out = back._data()  # BF16 too (as_numpy refuses it)
    assert back.name() == "Y"
    assert back.shape() == [2, 3]
    assert back.triton_dtype() == src.triton_dtype() == BY_WIRE[wire].triton_code
    assert out.dtype == arr.dtype
    np.testing.assert_array_equal(out, arr)
    assert np.shares_memory(out, arr)
    assert back._datatype() is (BF16 if wire == "BF16" else None)


@pytest.mark.parametrize("shape", [(), (0,), (4, 0, 2), (1,), (2, 1, 3)])
def test_round_trip_of_scalars_and_empty_tensors(shape: tuple[int, ...]) -> None:
    for wire in ("FP32", "BF16", "BOOL"):
        arr = read_only(sample(wire, shape))
        back = pb_utils.Tensor.from_dlpack("Y", pb_tensor("X", wire, arr).to_dlpack())
        assert back.shape() == list(shape)
        assert back._data().dtype == arr.dtype
        np.testing.assert_array_equal(back._data(), arr)


@pytest.mark.parametrize("wire", NUMERIC)
@pytest.mark.parametrize("writable", [True, False], ids=["writable", "read-only"])
def test_numpy_from_dlpack_of_a_pb_tensor(wire: str, writable: bool) -> None:
    arr = sample(wire)
    if not writable:
        arr = read_only(arr)
    t = pb_utils.Tensor("X", arr)
    assert t.__dlpack_device__() == (1, 0)
    out = np.from_dlpack(t)
    assert out.dtype == arr.dtype
    np.testing.assert_array_equal(out, arr)
    assert np.shares_memory(out, arr)
    if not writable and np.lib.NumpyVersion(np.__version__) >= "2.1.0":
        # numpy asks for a DLPack 1.x capsule, which carries the read-only flag
        assert not out.flags.writeable


def test_numpy_refuses_bf16_cleanly_and_nothing_leaks() -> None:
    arr = sample("BF16")
    alive = weakref.ref(arr)
    t = pb_tensor("X", "BF16", arr)
    with pytest.raises(Exception) as info:
        np.from_dlpack(t)  # numpy has no bfloat16
    assert not isinstance(info.value, SystemError)  # the error was not swallowed by a destructor
    del t, arr, info
    collect()
    assert alive() is None


def test_dlpack_keyword_arguments_of_the_array_api() -> None:
    arr = read_only(sample("FP32"))
    t = pb_utils.Tensor("X", arr)
    legacy = t.__dlpack__(stream=None)
    assert _capsule_name(legacy) == b"dltensor"
    if np.lib.NumpyVersion(np.__version__) >= "2.1.0":
        versioned = t.__dlpack__(stream=None, max_version=(1, 0), dl_device=(1, 0), copy=False)
        assert _capsule_name(versioned) == b"dltensor_versioned"
        back = pb_utils.Tensor.from_dlpack("Y", versioned)
        assert np.shares_memory(back.as_numpy(), arr)
        assert not back.as_numpy().flags.writeable  # the read-only flag is honoured
        bf = pb_tensor("B", "BF16", read_only(sample("BF16")))
        back = pb_utils.Tensor.from_dlpack("Y", bf.__dlpack__(max_version=(1, 0)))
        assert back._datatype() is BF16
        np.testing.assert_array_equal(back._data(), bf._data())


def test_bytes_tensors_cannot_be_exported() -> None:
    t = pb_utils.Tensor("S", np.array([b"a", b"bc"], dtype=np.object_))
    with pytest.raises(BufferError, match="string tensors"):
        t.to_dlpack()


# -- BF16 --------------------------------------------------------------------------------------


def test_bf16_tensor_holds_uint16_words() -> None:
    words = bf16_words(np.array([1.0, -2.0, 0.5], dtype=np.float32))
    t = pb_utils.Tensor._typed("X", words, BF16)
    assert t._data() is words
    assert t.triton_dtype() == 14
    assert t._datatype() is BF16
    assert repr(t) == "Tensor('X', shape=[3], dtype=BF16)"
    assert pb_utils.Tensor("U", words).triton_dtype() == 3  # plain uint16 stays UINT16
    assert pb_utils.Tensor("U", words)._datatype() is None


def test_bf16_as_numpy_is_refused_as_the_reference_refuses_it() -> None:
    t = pb_utils.Tensor._typed("X", bf16_words(np.array([1.0], dtype=np.float32)), BF16)
    with pytest.raises(pb_utils.TritonModelException) as info:
        t.as_numpy()
    assert str(info.value) == (
        "Tensor dtype is BF16 and cannot be converted to NumPy. Use to_dlpack() and from_dlpack() instead."
    )


def test_bf16_from_a_bfloat16_capsule_of_another_producer() -> None:
    # a producer such as torch hands out kDLBfloat: here a numpy capsule relabelled as bfloat16
    words = bf16_words(np.array([[1.0, 3.5], [-0.25, 8.0]], dtype=np.float32))
    capsule = words.__dlpack__()
    t = dl_tensor(capsule)
    t.code, t.bits = 4, 16
    back = pb_utils.Tensor.from_dlpack("Y", capsule)
    assert back.triton_dtype() == 14
    assert back._data().dtype == np.uint16
    np.testing.assert_array_equal(back._data(), words)
    assert np.shares_memory(back._data(), words)
    # the words are bfloat16: widened back to float32 they are the original values
    f = (back._data().astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(f, [[1.0, 3.5], [-0.25, 8.0]])


# -- consuming capsules ------------------------------------------------------------------------


def test_a_capsule_is_consumed_once() -> None:
    capsule = pb_utils.Tensor("X", sample("INT32")).to_dlpack()
    pb_utils.Tensor.from_dlpack("Y", capsule)
    assert _capsule_name(capsule) == b"used_dltensor"
    with pytest.raises(pb_utils.TritonModelException, match="consumed once"):
        pb_utils.Tensor.from_dlpack("Z", capsule)


def test_a_capsule_numpy_consumed_cannot_be_consumed_again() -> None:
    capsule = pb_utils.Tensor("X", sample("INT32")).to_dlpack()

    class Holder:
        def __dlpack__(self, stream: Any = None) -> Any:
            return capsule

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

    np.from_dlpack(Holder())
    with pytest.raises(pb_utils.TritonModelException, match="consumed once"):
        pb_utils.Tensor.from_dlpack("Z", capsule)


def test_what_is_not_a_dlpack_tensor_is_refused() -> None:
    with pytest.raises(pb_utils.TritonModelException, match="Tensor must be a DLPack capsule"):
        pb_utils.Tensor.from_dlpack("Y", [1, 2, 3])


def test_a_device_neither_host_nor_cuda_is_refused() -> None:
    # CUDA tensors are taken (GPU tensors: tests/e2e/test_e2e_python_gpu.py); ROCm's are not
    class OnRocm:
        def __dlpack__(self, stream: Any = None) -> Any:
            raise AssertionError("must not be asked for its data")

        def __dlpack_device__(self) -> tuple[int, int]:
            return (10, 0)  # kDLROCM

    with pytest.raises(pb_utils.TritonModelException, match="DLDevice type 10 is not support"):
        pb_utils.Tensor.from_dlpack("Y", OnRocm())


def test_non_contiguous_tensors_are_refused_and_not_consumed() -> None:
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    alive = weakref.ref(base)
    capsule = pb_utils.Tensor("X", base.T).to_dlpack()  # Fortran order: strides (1, 4)
    with pytest.raises(pb_utils.TritonModelException, match="not contiguous"):
        pb_utils.Tensor.from_dlpack("Y", capsule)
    assert _capsule_name(capsule) == b"dltensor"  # still the producer's: its destructor frees it
    del capsule, base
    collect()
    assert alive() is None


def test_strides_of_size_one_dimensions_do_not_matter() -> None:
    base = np.arange(3, dtype=np.int64)
    odd = np.lib.stride_tricks.as_strided(base, shape=(3, 1), strides=(8, 800))
    back = pb_utils.Tensor.from_dlpack("Y", pb_utils.Tensor("X", odd).to_dlpack())
    np.testing.assert_array_equal(back.as_numpy(), [[0], [1], [2]])
    assert np.shares_memory(back.as_numpy(), base)


def test_byte_offset_and_views_are_honoured() -> None:
    base = np.arange(10, dtype=np.int16)
    back = pb_utils.Tensor.from_dlpack("Y", pb_utils.Tensor("X", base[3:7]).to_dlpack())
    np.testing.assert_array_equal(back.as_numpy(), [3, 4, 5, 6])
    # a producer that points at the buffer's start and says where the tensor begins
    capsule = base[3:7].__dlpack__()
    t = dl_tensor(capsule)
    t.data -= 6
    t.byte_offset = 6
    back = pb_utils.Tensor.from_dlpack("Z", capsule)
    np.testing.assert_array_equal(back.as_numpy(), [3, 4, 5, 6])
    assert np.shares_memory(back.as_numpy(), base[3:7])


def test_writes_through_the_consumer_reach_the_producer() -> None:
    arr = np.zeros(4, dtype=np.float32)
    back = pb_utils.Tensor.from_dlpack("Y", pb_utils.Tensor("X", arr).to_dlpack())
    back.as_numpy()[2] = 7.0
    assert arr[2] == 7.0


# -- lifetime ----------------------------------------------------------------------------------


@pytest.mark.parametrize("wire", ["FP32", "BF16", "BOOL"])
@pytest.mark.parametrize("writable", [True, False], ids=["writable", "read-only"])
def test_the_source_lives_until_the_consumer_lets_go(wire: str, writable: bool) -> None:
    arr = sample(wire).copy()  # owns its memory: views of it (bool's uint8 view) keep it alive
    arr.flags.writeable = writable
    expected = arr.copy()
    alive = weakref.ref(arr)
    src = pb_tensor("X", wire, arr)
    capsule = src.to_dlpack()
    back = pb_utils.Tensor.from_dlpack("Y", capsule)
    out = back._data()
    del src, arr, capsule, back
    collect()
    assert alive() is not None  # the consumer's array still uses it
    np.testing.assert_array_equal(out, expected)
    del out
    collect()
    assert alive() is None


def test_an_unconsumed_capsule_releases_the_source() -> None:
    arr = read_only(sample("INT64"))
    alive = weakref.ref(arr)
    capsule = pb_utils.Tensor("X", arr).to_dlpack()
    del arr
    collect()
    assert alive() is not None
    del capsule
    collect()
    assert alive() is None


def test_a_foreign_producer_is_released_when_the_tensor_is_freed() -> None:
    def its_capsule(a: np.ndarray[Any, Any]) -> Any:
        return a.__dlpack__()

    def itself(a: np.ndarray[Any, Any]) -> Any:
        return a

    for get in (its_capsule, itself):
        arr = np.arange(5, dtype=np.uint32)
        alive = weakref.ref(arr)
        t = pb_utils.Tensor.from_dlpack("Y", get(arr))
        assert np.shares_memory(t.as_numpy(), arr)
        del arr
        collect()
        assert alive() is not None
        del t
        collect()
        assert alive() is None


def test_release_from_another_thread() -> None:
    arr = np.arange(8, dtype=np.float64)
    arr.flags.writeable = False
    alive = weakref.ref(arr)
    box = [pb_utils.Tensor.from_dlpack("Y", pb_utils.Tensor("X", arr).to_dlpack())]
    del arr
    collect()
    assert alive() is not None
    thread = threading.Thread(target=box.clear)  # the last reference goes in another thread
    thread.start()
    thread.join()
    collect()
    assert alive() is None


# -- through the backend: BF16 inputs and outputs -----------------------------------------------

BF16_CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "X" data_type: TYPE_BF16 dims: [ -1 ] }} ]
output [
  {{ name: "DL" data_type: TYPE_BF16 dims: [ -1 ] }},
  {{ name: "SAME" data_type: TYPE_BF16 dims: [ -1 ] }}
]
"""

BF16_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X")
            try:
                x.as_numpy()
            except pb_utils.TritonModelException as e:
                refused = str(e)
            self.seen = (x.triton_dtype(), refused, r.inputs()[0].triton_dtype())
            dl = pb_utils.Tensor.from_dlpack("DL", x.to_dlpack())
            same = pb_utils.Tensor.from_dlpack("SAME", x)
            out.append(pb_utils.InferenceResponse([dl, same]))
        return out
"""


def _instance(tmp_path: Path) -> PythonInstance:
    model_dir = tmp_path / "bf16_model"
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "config.pbtxt").write_text(BF16_CONFIG.format(name=model_dir.name))
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(BF16_MODEL))
    cfg, _ = load_model_config(model_dir)
    normalize_config(cfg, model_dir.name, model_dir=model_dir)
    ctx = LoadContext(model_dir.name, 1, model_dir, model_dir / "1", cfg, None)
    inst = PythonBackend().load(ctx).create_instance(InstanceSpec(f"{model_dir.name}_0", "CPU", 0))
    assert isinstance(inst, PythonInstance)
    return inst


def test_bf16_inputs_reach_the_model_as_bf16_and_come_back_as_bf16(tmp_path: Path) -> None:
    words = bf16_words(np.array([1.0, -2.0, 0.5, 65504.0], dtype=np.float32))
    raw = words.tobytes()  # as received: the array is a read-only view over these bytes
    request = InferRequest(model_name="bf16_model", inputs={"X": CoreTensor("X", BF16, (4,), raw=raw)})
    inst = _instance(tmp_path)
    result: list[Any] = []
    # its own thread: execute installs per-thread pb_utils hooks
    thread = threading.Thread(target=lambda: result.append(inst.execute([request])))
    thread.start()
    thread.join(30)
    (response,) = result[0]
    assert response.error is None
    assert inst.obj.seen == (14, pb_utils.BF16_AS_NUMPY, 14)
    outs = {t.name: t for t in response.outputs}
    for name in ("DL", "SAME"):
        t = outs[name]
        assert isinstance(t.datatype, DataType)
        assert t.datatype is BF16
        assert t.shape == (4,)
        assert bytes(t.to_bytes()) == raw
        assert np.shares_memory(t.array, request.inputs["X"].array)  # never copied


def test_bls_inputs_keep_their_datatype() -> None:
    words = bf16_words(np.array([1.5, 2.5], dtype=np.float32))
    req = pb_utils.InferenceRequest(
        model_name="m", requested_output_names=["Y"], inputs=[pb_utils.Tensor._typed("X", words, BF16)]
    )
    assert req._core.inputs["X"].datatype is BF16
