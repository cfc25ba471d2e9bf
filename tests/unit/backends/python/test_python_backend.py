"""The in-process Python backend: load a model.py, initialize, execute, errors, auto-complete, finalize."""

from __future__ import annotations

import asyncio
import json
import textwrap
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pytest

from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.python import pb_utils
from inferd.backends.python.backend import PythonBackend, PythonInstance
from inferd.backends.python.loader import format_exception
from inferd.core.request import InferRequest, RequestedOutput
from inferd.core.response import InferResponse, ResponseStream
from inferd.core.tensor import Tensor
from inferd.errors import (
    AlreadyExistsError,
    InferdError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    RequestCancelledError,
    UnavailableError,
    UnknownError,
    UnsupportedError,
)
from inferd.repository import autofill_backend_fields, config_to_json, load_model_config, normalize_config

T = TypeVar("T")

CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 8
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [
  {{ name: "Y0" data_type: TYPE_FP32 dims: [ 2 ] }},
  {{ name: "Y1" data_type: TYPE_FP32 dims: [ 2 ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
parameters [ {{ key: "k" value: {{ string_value: "v" }} }} ]
"""

ECHO = """
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = args
        self.finalized = False

    def execute(self, requests):
        out = []
        for r in requests:
            x = pb_utils.get_input_tensor_by_name(r, "X").as_numpy()
            self.seen = r.requested_output_names()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y0", x), pb_utils.Tensor("Y1", -x)]))
        return out

    def finalize(self):
        self.finalized = True
"""


def _write_model(root: Path, name: str, source: str, config: str | None = CONFIG) -> Path:
    model_dir = root / name
    (model_dir / "1").mkdir(parents=True)
    if config is not None:
        (model_dir / "config.pbtxt").write_text(config.format(name=name))
    (model_dir / "1" / "model.py").write_text(textwrap.dedent(source))
    return model_dir


def _config(model_dir: Path) -> Any:
    cfg, _ = load_model_config(model_dir)
    normalize_config(cfg, model_dir.name, model_dir=model_dir)
    return cfg


def _instance(
    model_dir: Path,
    infer_blocking: Callable[[InferRequest], list[InferResponse]] | None = None,
    spec: InstanceSpec | None = None,
) -> PythonInstance:
    cfg = _config(model_dir)
    ctx = LoadContext(model_dir.name, 1, model_dir, model_dir / "1", cfg, infer_blocking)
    model = PythonBackend().load(ctx)
    inst = model.create_instance(spec or InstanceSpec(f"{model_dir.name}_0", "CPU", 0))
    assert isinstance(inst, PythonInstance)
    return inst


_worker = ThreadPoolExecutor(1, thread_name_prefix="test-instance")


def in_worker(fn: Callable[[], T]) -> T:
    """Run ``fn`` in a worker thread, as the instance pool does (pb_utils hooks are per thread)."""
    return _worker.submit(fn).result(timeout=30)


def _request(name: str, x: np.ndarray[Any, Any] | None = None, **kwargs: Any) -> InferRequest:
    x = np.array([[1.0, 2.0]], dtype=np.float32) if x is None else x
    return InferRequest(model_name=name, inputs={"X": Tensor.from_array("X", x)}, **kwargs)


def _line_of(source: str, needle: str) -> int:
    lines = textwrap.dedent(source).splitlines()
    return next(i for i, line in enumerate(lines, 1) if needle in line)


# -- load and initialize -------------------------------------------------------------------------


def test_initialize_args(tmp_path: Path) -> None:
    model_dir = _write_model(tmp_path, "echo_args", ECHO)
    inst = _instance(model_dir, spec=InstanceSpec("echo_args_0", "CPU", 0))
    args = inst.obj.args
    assert set(args) == {
        "model_config",
        "model_instance_kind",
        "model_instance_name",
        "model_instance_device_id",
        "model_repository",
        "model_version",
        "model_name",
    }
    assert all(isinstance(v, str) for v in args.values())
    assert json.loads(args["model_config"]) == config_to_json(_config(model_dir))
    assert json.loads(args["model_config"])["parameters"] == {"k": {"string_value": "v"}}
    assert args["model_instance_name"] == "echo_args_0"
    assert args["model_instance_kind"] == "CPU"
    assert args["model_instance_device_id"] == "0"
    assert args["model_repository"] == str(model_dir)  # the model folder, as Triton passes it
    assert args["model_version"] == "1"
    assert args["model_name"] == "echo_args"


def test_initialize_args_of_a_gpu_instance(tmp_path: Path) -> None:
    inst = _instance(_write_model(tmp_path, "gpu_args", ECHO), spec=InstanceSpec("g_3", "GPU", 2))
    assert inst.obj.args["model_instance_kind"] == "GPU"
    assert inst.obj.args["model_instance_device_id"] == "2"
    assert inst.obj.args["model_instance_name"] == "g_3"


def test_initialize_error(tmp_path: Path) -> None:
    source = """
    class TritonPythonModel:
        def initialize(self, args):
            raise ValueError("cannot start")

        def execute(self, requests):
            return []
    """
    model_dir = _write_model(tmp_path, "init_error", source)
    with pytest.raises(InternalError) as info:
        _instance(model_dir)
    path = model_dir / "1" / "model.py"
    line = _line_of(source, "cannot start")
    assert info.value.message == f"ValueError: cannot start\n\nAt:\n  {path}({line}): initialize\n"


def test_model_without_initialize_or_finalize(tmp_path: Path) -> None:
    source = """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([]) for _ in requests]
    """
    inst = _instance(_write_model(tmp_path, "bare", source))
    (resp,) = in_worker(lambda: inst.execute([_request("bare")])) or []
    assert resp.error is None and resp.outputs == []
    inst.unload()


def test_missing_model_file(tmp_path: Path) -> None:
    model_dir = _write_model(tmp_path, "no_file", ECHO)
    (model_dir / "1" / "model.py").unlink()
    with pytest.raises(InvalidArgumentError, match="the Python model file is missing"):
        _instance(model_dir)


def test_model_file_without_the_class(tmp_path: Path) -> None:
    model_dir = _write_model(tmp_path, "no_class", "class Other:\n    pass\n")
    with pytest.raises(InvalidArgumentError, match="does not define class TritonPythonModel"):
        _instance(model_dir)


def test_model_file_that_fails_to_import(tmp_path: Path) -> None:
    model_dir = _write_model(tmp_path, "bad_import", "import no_such_module_for_inferd_tests\n")
    with pytest.raises(InternalError) as info:
        _instance(model_dir)
    assert info.value.message.startswith(f"Failed to load model file '{model_dir / '1' / 'model.py'}': ")
    assert "ModuleNotFoundError: No module named 'no_such_module_for_inferd_tests'" in info.value.message


def test_helper_modules_beside_model_py_import(tmp_path: Path) -> None:
    model_dir = _write_model(
        tmp_path, "with_helper", "from inferd_test_helper_mod import Model as TritonPythonModel\n"
    )
    (model_dir / "1" / "inferd_test_helper_mod.py").write_text(
        "class Model:\n    def execute(self, requests):\n        return None\n"
    )
    assert _instance(model_dir).obj.__class__.__name__ == "Model"


# -- execute -------------------------------------------------------------------------------------


def test_execute_returns_responses_in_order(tmp_path: Path) -> None:
    inst = _instance(_write_model(tmp_path, "echo_order", ECHO))
    reqs = [_request("echo_order", np.full((1, 2), i, np.float32), id=f"r{i}") for i in range(3)]
    responses = in_worker(lambda: inst.execute(reqs))
    assert responses is not None
    assert [r.id for r in responses] == ["r0", "r1", "r2"]
    for i, resp in enumerate(responses):
        assert resp.model_name == "echo_order" and resp.model_version == "1"
        assert [t.name for t in resp.outputs] == ["Y0", "Y1"]
        assert resp.outputs[0].array.tolist() == [[i, i]]
        assert resp.outputs[0].datatype.wire == "FP32"
    assert inst.obj.seen == {"Y0", "Y1"}  # nothing asked for: every config output
    assert all(t >= 0 for t in inst.last_timings)


def test_execute_shares_input_memory(tmp_path: Path) -> None:
    inst = _instance(_write_model(tmp_path, "echo_mem", ECHO))
    x = np.array([[3.0, 4.0]], dtype=np.float32)
    (resp,) = in_worker(lambda: inst.execute([_request("echo_mem", x)])) or []
    assert resp.outputs[0].array is x


@pytest.mark.parametrize("with_names", [True, False])
def test_unrequested_outputs_are_dropped(tmp_path: Path, with_names: bool) -> None:
    inst = _instance(_write_model(tmp_path, f"echo_drop_{with_names}", ECHO))
    req = _request("m", outputs=[RequestedOutput("Y1")])
    if with_names:
        req.output_names = frozenset({"Y1"})
    (resp,) = in_worker(lambda: inst.execute([req])) or []
    assert [t.name for t in resp.outputs] == ["Y1"]
    assert inst.obj.seen == {"Y1"}


def test_execute_exception_is_internal_with_the_traceback(tmp_path: Path) -> None:
    source = """
    class TritonPythonModel:
        def execute(self, requests):
            raise ValueError("boom")
    """
    model_dir = _write_model(tmp_path, "boom", source)
    inst = _instance(model_dir)
    with pytest.raises(InternalError) as info:
        in_worker(lambda: inst.execute([_request("boom")]))
    path = "boom/1/model.py"  # from the repository's root: a client learns no server path
    line = _line_of(source, "boom")
    assert info.value.message == (
        f"Failed to process the request(s) for model 'boom_0', message: ValueError: boom\n\nAt:\n"
        f"  {path}({line}): execute\n"
    )
    assert info.value.code.http_status == 500


def test_traceback_lists_the_innermost_frame_first(tmp_path: Path) -> None:
    source = """
    class TritonPythonModel:
        def helper(self):
            raise KeyError("k")

        def execute(self, requests):
            return self.helper()
    """
    model_dir = _write_model(tmp_path, "deep", source)
    inst = _instance(model_dir)
    with pytest.raises(InternalError) as info:
        in_worker(lambda: inst.execute([_request("deep")]))
    path = "deep/1/model.py"
    assert info.value.message.endswith(
        f"message: KeyError: 'k'\n\nAt:\n  {path}({_line_of(source, 'raise KeyError')}): helper\n"
        f"  {path}({_line_of(source, 'return self.helper()')}): execute\n"
    )


def test_format_exception() -> None:
    def fail() -> None:
        raise RuntimeError("x")

    try:
        fail()
    except RuntimeError as e:
        text = format_exception(e)
    head, frames = text.split("\n\nAt:\n")
    assert head == "RuntimeError: x"
    innermost, outer = frames.splitlines()
    assert innermost.startswith(f"  {__file__}(") and innermost.endswith("): fail")
    assert outer.endswith("): test_format_exception")
    assert frames.endswith("\n")


ERRORS = """
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            code = json.loads(r.parameters())["code"]
            out.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("msg " + str(code), code)))
        return out
"""


@pytest.mark.parametrize(
    ("code", "cls"),
    [
        (pb_utils.TritonError.UNKNOWN, UnknownError),
        (pb_utils.TritonError.INTERNAL, InternalError),
        (pb_utils.TritonError.NOT_FOUND, NotFoundError),
        (pb_utils.TritonError.INVALID_ARG, InvalidArgumentError),
        (pb_utils.TritonError.UNAVAILABLE, UnavailableError),
        (pb_utils.TritonError.UNSUPPORTED, UnsupportedError),
        (pb_utils.TritonError.ALREADY_EXISTS, AlreadyExistsError),
        (pb_utils.TritonError.CANCELLED, RequestCancelledError),
        (99, InternalError),
    ],
)
def test_triton_error_responses_map_to_error_codes(tmp_path: Path, code: int, cls: type[InferdError]) -> None:
    inst = _instance(_write_model(tmp_path, "errors", ERRORS))
    (resp,) = in_worker(lambda: inst.execute([_request("errors", parameters={"code": code})])) or []
    assert type(resp.error) is cls
    assert resp.error.message == f"msg {code}"
    assert resp.outputs == []


def test_one_error_response_does_not_fail_the_batch(tmp_path: Path) -> None:
    source = """
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse(error=pb_utils.TritonError("bad", pb_utils.TritonError.INVALID_ARG))
                if r.request_id() == "bad"
                else pb_utils.InferenceResponse([pb_utils.Tensor("Y0", r.inputs()[0].as_numpy())])
                for r in requests
            ]
    """
    inst = _instance(_write_model(tmp_path, "mixed", source))
    good, bad = (
        in_worker(lambda: inst.execute([_request("mixed", id="ok"), _request("mixed", id="bad")])) or []
    )
    assert good.error is None and good.outputs[0].name == "Y0"
    assert isinstance(bad.error, InvalidArgumentError) and bad.error.message == "bad"


def test_wrong_number_of_responses(tmp_path: Path) -> None:
    source = """
    class TritonPythonModel:
        def execute(self, requests):
            return []
    """
    inst = _instance(_write_model(tmp_path, "too_few", source))
    with pytest.raises(InternalError) as info:
        in_worker(lambda: inst.execute([_request("too_few"), _request("too_few")]))
    assert info.value.message == (  # the reference's text, its newline included
        "Failed to process the request(s) for model 'too_few_0', message: Number of InferenceResponse objects "
        "do not match the number of InferenceRequest objects. InferenceRequest(s) size is:2, and "
        "InferenceResponse(s) size is:0\n"
    )


def test_response_of_the_wrong_type(tmp_path: Path) -> None:
    source = """
    class TritonPythonModel:
        def execute(self, requests):
            return ["oops" for _ in requests]
    """
    inst = _instance(_write_model(tmp_path, "wrong_type", source))
    with pytest.raises(InternalError) as info:  # the whole batch fails, as in the reference
        in_worker(lambda: inst.execute([_request("wrong_type")]))
    assert info.value.message == (
        "Failed to process the request(s) for model 'wrong_type_0', message: Expected an 'InferenceResponse' "
        "object in the execute function return list, found type '<class 'str'>'."
    )


def test_a_returned_tuple_is_refused(tmp_path: Path) -> None:
    source = """
    class TritonPythonModel:
        def execute(self, requests):
            return tuple(requests)
    """
    inst = _instance(_write_model(tmp_path, "a_tuple", source))
    with pytest.raises(InternalError) as info:
        in_worker(lambda: inst.execute([_request("a_tuple")]))
    assert info.value.message == (
        "Failed to process the request(s) for model 'a_tuple_0', message: Expected a list in the execute "
        "return, found type '<class 'tuple'>'."
    )


def test_outputs_pass_through_as_produced(tmp_path: Path) -> None:
    # Triton does not check Python outputs against the config: dtype and shape are as produced
    source = """
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [
                pb_utils.InferenceResponse([
                    pb_utils.Tensor("Y0", np.zeros((3,), dtype=np.float64)),
                    pb_utils.Tensor("Y1", np.array(["é", "b"], dtype=object)),
                ])
                for r in requests
            ]
    """
    inst = _instance(_write_model(tmp_path, "as_produced", source))
    (resp,) = in_worker(lambda: inst.execute([_request("as_produced")])) or []
    y0, y1 = resp.outputs
    assert (y0.datatype.wire, y0.shape) == ("FP64", (3,))
    assert y1.datatype.wire == "BYTES"
    assert bytes(y1.to_bytes()) == b"\x02\x00\x00\x00\xc3\xa9\x01\x00\x00\x00b"


def test_output_of_an_unsupported_dtype(tmp_path: Path) -> None:
    source = """
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            return [pb_utils.InferenceResponse([pb_utils.Tensor("Y0", np.zeros(2, np.complex64))]) for r in requests]
    """
    inst = _instance(_write_model(tmp_path, "complex_out", source))
    with pytest.raises(InternalError) as info:  # pb_utils.Tensor refuses it, as the reference's does
        in_worker(lambda: inst.execute([_request("complex_out")]))
    assert "TritonModelException: NumPy dtype is not supported." in info.value.message


def test_finalize_called_on_unload(tmp_path: Path) -> None:
    inst = _instance(_write_model(tmp_path, "fin", ECHO))
    assert inst.obj.finalized is False
    inst.unload()
    assert inst.obj.finalized is True


# -- response senders and BLS --------------------------------------------------------------------

SENDER = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for r in requests:
            if r.request_id() == "silent":
                continue
            sender = r.get_response_sender()
            x = r.inputs()[0].as_numpy()
            sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("Y0", x * 2)]),
                        flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def test_response_sender_of_a_non_decoupled_model(tmp_path: Path) -> None:
    inst = _instance(_write_model(tmp_path, "sender", SENDER))

    async def main() -> tuple[InferResponse, InferResponse]:
        loop = asyncio.get_running_loop()
        reqs = [_request("sender", id="loud"), _request("sender", id="silent")]
        for r in reqs:
            r.stream = ResponseStream(loop)
        assert await asyncio.to_thread(inst.execute, reqs) is None
        assert reqs[0].stream is not None and reqs[1].stream is not None
        return await reqs[0].stream.first(), await reqs[1].stream.first()

    loud, silent = asyncio.run(main())
    assert loud.error is None
    assert loud.outputs[0].array.tolist() == [[2.0, 4.0]]
    assert isinstance(silent.error, InternalError)
    assert (
        silent.error.message
        == "Python model 'sender_0' returned None from execute without sending a response"
    )
    assert inst.open == {}


def test_response_sender_from_any_thread(tmp_path: Path) -> None:
    # the pool may run an instance in its worker thread or, inline, on the event loop's thread
    inst = _instance(_write_model(tmp_path, "sender_threads", SENDER))

    async def main() -> list[InferResponse]:
        loop = asyncio.get_running_loop()
        out = []
        for runner in (asyncio.to_thread, _other_thread):
            req = _request("sender_threads", id="loud")
            req.stream = ResponseStream(loop)
            await runner(inst.execute, [req])
            out.append(await asyncio.wait_for(req.stream.first(), 10))
        return out

    for resp in asyncio.run(main()):
        assert resp.error is None
        assert resp.outputs[0].array.tolist() == [[2.0, 4.0]]


async def _other_thread(fn: Callable[..., T], *args: Any) -> T:
    with ThreadPoolExecutor(1) as pool:
        return await asyncio.get_running_loop().run_in_executor(pool, fn, *args)


BLS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = []
        for r in requests:
            sub = pb_utils.InferenceRequest(
                model_name=r.request_id(),
                requested_output_names=["Z"],
                inputs=[pb_utils.Tensor("A", r.inputs()[0].as_numpy())],
            )
            resp = sub.exec()
            if resp.has_error():
                out.append(pb_utils.InferenceResponse(error=resp.error()))
            else:
                z = pb_utils.get_output_tensor_by_name(resp, "Z").as_numpy()
                out.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y0", z)]))
        return out
"""


def test_bls(tmp_path: Path) -> None:
    seen: list[InferRequest] = []

    def infer_blocking(request: InferRequest) -> list[InferResponse]:
        seen.append(request)
        if request.model_name == "missing":
            return [
                InferResponse(
                    "missing", "", error=NotFoundError("Request for unknown model: 'missing' is not found")
                )
            ]
        z = request.inputs["A"].array + 1
        return [InferResponse(request.model_name, "1", outputs=[Tensor.from_array("Z", z)])]

    inst = _instance(_write_model(tmp_path, "bls", BLS), infer_blocking)
    ok, missing = (
        in_worker(lambda: inst.execute([_request("bls", id="other"), _request("bls", id="missing")])) or []
    )
    assert inst.uses_bls
    assert ok.outputs[0].array.tolist() == [[2.0, 3.0]]
    assert type(missing.error) is NotFoundError
    assert missing.error.message == "Request for unknown model: 'missing' is not found"
    assert [r.model_name for r in seen] == ["other", "missing"]
    assert seen[0].outputs is not None and [o.name for o in seen[0].outputs] == ["Z"]


def test_bls_without_a_server(tmp_path: Path) -> None:
    inst = _instance(_write_model(tmp_path, "bls_alone", BLS))
    with pytest.raises(InternalError, match="BLS is not available: the model is not served by a server"):
        in_worker(lambda: inst.execute([_request("bls_alone", id="other")]))


# -- auto-complete -------------------------------------------------------------------------------

AUTO = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        {body}
        return auto_complete_model_config

    def execute(self, requests):
        return None
"""


def _auto_complete(tmp_path: Path, name: str, body: str, config: str | None = None) -> Any:
    model_dir = _write_model(tmp_path, name, AUTO.replace("{body}", body), config=config)
    cfg, _ = load_model_config(model_dir)
    autofill_backend_fields(cfg, name, model_dir, version_dirs=[model_dir / "1"])
    PythonBackend().auto_complete(cfg, model_dir, model_dir / "1")
    normalize_config(cfg, name)
    return cfg


def test_auto_complete_config_is_applied(tmp_path: Path) -> None:
    body = """c = auto_complete_model_config
        c.add_input({"name": "IN", "data_type": "TYPE_INT32", "dims": [3]})
        c.add_output({"name": "OUT", "data_type": "TYPE_STRING", "dims": [-1]})
        c.set_max_batch_size(4)
        c.set_dynamic_batching()"""
    cfg = _auto_complete(tmp_path, "auto", body)
    assert cfg.name == "auto" and cfg.backend == "python"
    assert [(i.name, i.data_type, list(i.dims)) for i in cfg.input] == [("IN", 8, [3])]
    assert [(o.name, o.data_type, list(o.dims)) for o in cfg.output] == [("OUT", 13, [-1])]
    assert cfg.max_batch_size == 4
    assert cfg.HasField("dynamic_batching")
    assert list(cfg.dynamic_batching.preferred_batch_size) == [4]


def test_auto_complete_sees_the_config_file(tmp_path: Path) -> None:
    body = """assert auto_complete_model_config.as_dict()["max_batch_size"] == 8
        auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})"""
    cfg = _auto_complete(tmp_path, "auto_file", body, config=CONFIG)
    assert [i.name for i in cfg.input] == ["X"]
    assert cfg.max_batch_size == 8


def test_auto_complete_conflict(tmp_path: Path) -> None:
    body = """auto_complete_model_config.add_input({"name": "X", "data_type": "TYPE_INT8", "dims": [2]})"""
    with pytest.raises(InvalidArgumentError) as info:
        _auto_complete(tmp_path, "auto_conflict", body, config=CONFIG)
    assert info.value.message.startswith(
        "auto_complete_config failed: ValueError: unable to load model 'auto_conflict', configuration expects "
        "data_type TYPE_FP32 for input 'X' but auto-complete sets TYPE_INT8"
    )


def test_auto_complete_must_return_the_config(tmp_path: Path) -> None:
    body = "return None"
    with pytest.raises(
        InvalidArgumentError, match="auto_complete_config must return the ModelConfig it was given"
    ):
        _auto_complete(tmp_path, "auto_none", body)


def test_auto_complete_invalid_config(tmp_path: Path) -> None:
    body = """auto_complete_model_config.as_dict()["no_such_field"] = 1"""
    with pytest.raises(InvalidArgumentError, match="auto_complete_config produced an invalid config"):
        _auto_complete(tmp_path, "auto_invalid", body)


def test_model_without_auto_complete_is_left_alone(tmp_path: Path) -> None:
    model_dir = _write_model(tmp_path, "plain", ECHO)
    cfg = _config(model_dir)
    before = cfg.SerializeToString()
    PythonBackend().auto_complete(cfg, model_dir, model_dir / "1")
    PythonBackend().auto_complete(cfg, model_dir, None)
    assert cfg.SerializeToString() == before
