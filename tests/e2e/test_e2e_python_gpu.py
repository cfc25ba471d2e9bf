"""Python models with GPU tensors (issue 27), behind a real ``inferd serve``: a model moves its
input to the GPU with torch, hands it on as ``pb_utils.Tensor.from_dlpack`` (``is_cpu()`` False)
in a BLS request with ``preferred_memory`` GPU to a model that sets ``FORCE_CPU_ONLY_INPUT_TENSORS:
"no"``; that model gets the same device memory (its pointer, in the same process: no copy), computes
on it and answers with a GPU tensor, which reaches the caller still on the GPU; ``as_numpy()`` of a
GPU tensor gives a host copy (the reference raises: server#3547), and the client gets the GPU output
over HTTP and gRPC.

Runs where torch sees a CUDA device (``pytest -m gpu``; scripts/gpu_check.sh on a lent GPU machine);
skipped with the reason elsewhere. Without a GPU: tests/unit/backends/python/test_pb_dlpack.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from conftest import InferdProcess, grpc_client, http_client, serving

from inferd.gpu import cuda

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        cuda.device_count() == 0, reason="no CUDA device: the CUDA runtime (cuda-bindings) finds none"
    ),
    pytest.mark.timeout(240),
]

CALLER = """
import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = torch.from_dlpack(pb_utils.get_input_tensor_by_name(request, "IN").to_dlpack()).cuda()
            t = pb_utils.Tensor.from_dlpack("IN", x)
            sent_on_gpu = not t.is_cpu()
            bls = pb_utils.InferenceRequest(
                model_name="py_gpu_callee",
                inputs=[t],
                requested_output_names=["OUT", "PTR", "ON_GPU"],
                preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_GPU, 0),
            )
            r = bls.exec()
            if r.has_error():
                raise pb_utils.TritonModelException(r.error().message())
            out = pb_utils.get_output_tensor_by_name(r, "OUT")
            same = int(pb_utils.get_output_tensor_by_name(r, "PTR").as_numpy()[0]) == x.data_ptr()
            callee_gpu = int(pb_utils.get_output_tensor_by_name(r, "ON_GPU").as_numpy()[0])
            host = out.as_numpy()  # a GPU tensor read on the host: a copy
            expected = (x * 2).cpu().numpy()
            flags = np.array(
                [sent_on_gpu, callee_gpu, not out.is_cpu(), same, bool(np.array_equal(host, expected))],
                dtype=np.int32,
            )
            responses.append(pb_utils.InferenceResponse([
                out,  # the callee's GPU tensor, sent on as it is
                pb_utils.Tensor("FLAGS", flags),
            ]))
        return responses
"""
CALLEE = """
import numpy as np
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            t = pb_utils.get_input_tensor_by_name(request, "IN")
            x = torch.from_dlpack(t.to_dlpack())
            y = x * 2
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor.from_dlpack("OUT", y),
                pb_utils.Tensor("PTR", np.array([x.data_ptr()], dtype=np.int64)),
                pb_utils.Tensor("ON_GPU", np.array([int(not t.is_cpu() and x.is_cuda)], dtype=np.int32)),
            ]))
        return responses
"""
CONFIG = """
name: "{name}"
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 4 ] }} ]
output [
  {{ name: "OUT" data_type: TYPE_FP32 dims: [ 4 ] }}{extra_outputs}
]
instance_group [ {{ kind: KIND_CPU count: 1 }} ]
parameters {{ key: "execution_mode" value: {{ string_value: "thread" }} }}
{parameters}
"""
CALLER_OUTPUTS = ',\n  { name: "FLAGS" data_type: TYPE_INT32 dims: [ 5 ] }'
CALLEE_OUTPUTS = ',\n  { name: "PTR" data_type: TYPE_INT64 dims: [ 1 ] },\n  { name: "ON_GPU" data_type: TYPE_INT32 dims: [ 1 ] }'
KEEP_GPU = 'parameters { key: "FORCE_CPU_ONLY_INPUT_TENSORS" value: { string_value: "no" } }'


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InferdProcess]:
    import torch  # the torch extra (make install) and the GPU image both have it

    assert torch.cuda.is_available(), f"CUDA finds a device but torch {torch.__version__} does not"
    repo = tmp_path_factory.mktemp("py_gpu") / "models"
    for name, source, outputs, params in (
        ("py_gpu_caller", CALLER, CALLER_OUTPUTS, ""),
        ("py_gpu_callee", CALLEE, CALLEE_OUTPUTS, KEEP_GPU),
    ):
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.py").write_text(source)
        (repo / name / "config.pbtxt").write_text(
            CONFIG.format(name=name, extra_outputs=outputs, parameters=params)
        )
    log: Path = tmp_path_factory.mktemp("py_gpu_log") / "inferd.log"
    with serving(repo, log) as proc:
        yield proc


def test_gpu_tensors_pass_between_python_models_in_place(server: InferdProcess) -> None:
    x = np.array([1.0, -2.0, 3.5, 0.0], dtype=np.float32)
    with http_client(server) as c:
        inp = httpclient.InferInput("IN", [4], "FP32")
        inp.set_data_from_numpy(x)
        r = c.infer("py_gpu_caller", [inp])
        np.testing.assert_array_equal(r.as_numpy("OUT"), x * 2)  # a GPU output, copied out to send
        sent_on_gpu, callee_gpu, back_on_gpu, same_memory, host_copy_ok = r.as_numpy("FLAGS").tolist()
        assert sent_on_gpu == 1, "from_dlpack of a CUDA tensor gave a CPU tensor"
        assert callee_gpu == 1, "FORCE_CPU_ONLY_INPUT_TENSORS=no: the callee's input was not on the GPU"
        assert same_memory == 1, "the callee's input was a copy, not the caller's device memory"
        assert back_on_gpu == 1, "preferred_memory GPU: the BLS output came back on the host"
        assert host_copy_ok == 1, "as_numpy() of a GPU tensor did not give its values"
    with grpc_client(server) as g:
        ginp = grpcclient.InferInput("IN", [4], "FP32")
        ginp.set_data_from_numpy(x)
        gr = g.infer("py_gpu_caller", [ginp])
        np.testing.assert_array_equal(gr.as_numpy("OUT"), x * 2)
