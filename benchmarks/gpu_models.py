"""The models of the GPU benchmark (``gpu_bench.py``), written into a temporary repository: a
ResNet-50-sized convolutional net with random weights (TorchScript, traced here), served as
``resnet`` (one request per execute) and ``resnet_dyn`` (dynamic batching); ``sum_input``, a 16 MiB
FP32 input reduced to one number (the shared-memory row: the input's transfer is the cost); and
four Python models that keep weights on the GPU and run a matrix product there per request (the
memory row). Each profile says where they run: ``KIND_GPU`` on GPU 0, or ``KIND_CPU`` with a small
net for the dry run on a machine without a GPU.

torch is imported by the caller and handed in (the bench runs where torch is installed).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1 << 20


@dataclass(frozen=True)
class Profile:
    """What the bench builds and how long it measures."""

    name: str
    kind: str  # the instance groups' kind: KIND_GPU (gpus [0]) or KIND_CPU
    blocks: tuple[int, int, int, int]  # bottleneck blocks per stage (ResNet-50: 3, 4, 6, 3)
    width: int  # the first stage's width (ResNet-50: 64)
    image: int  # input height and width (224)
    concurrency: int  # row (b)'s
    rounds: int
    seconds: float  # one measurement's length (the plain loop, the Python client, a perf_analyzer window)
    shm_mib: int = 16

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (3, self.image, self.image)

    def instance_group(self, kind: str | None = None) -> str:
        kind = kind or self.kind
        gpus = " gpus: [ 0 ]" if kind == "KIND_GPU" else ""
        return f"instance_group [ {{ kind: {kind} count: 1{gpus} }} ]\n"


#: the issue's model: ResNet-50's layout (25.6 M parameters), 224 x 224 images, on GPU 0
GPU = Profile("gpu", "KIND_GPU", (3, 4, 6, 3), 64, 224, concurrency=16, rounds=3, seconds=1.5)
#: the dry run's: a small net of the same code, on the CPU, briefly
CPU = Profile("cpu", "KIND_CPU", (1, 1, 1, 1), 8, 64, concurrency=4, rounds=1, seconds=1.0)


def resnet(torch: Any, blocks: tuple[int, ...], width: int, classes: int = 1000) -> Any:
    """A ResNet with bottleneck blocks (He et al.): ``blocks=(3, 4, 6, 3), width=64`` is ResNet-50's
    layout. Weights are torch's default random initialisation (seeded by the caller)."""
    nn = torch.nn

    class Bottleneck(nn.Module):  # type: ignore[misc]
        def __init__(self, cin: int, mid: int, stride: int) -> None:
            super().__init__()
            out = mid * 4
            self.body = nn.Sequential(
                nn.Conv2d(cin, mid, 1, bias=False),
                nn.BatchNorm2d(mid),
                nn.ReLU(inplace=True),
                nn.Conv2d(mid, mid, 3, stride, 1, bias=False),
                nn.BatchNorm2d(mid),
                nn.ReLU(inplace=True),
                nn.Conv2d(mid, out, 1, bias=False),
                nn.BatchNorm2d(out),
            )
            self.skip = (
                nn.Sequential(nn.Conv2d(cin, out, 1, stride, bias=False), nn.BatchNorm2d(out))
                if stride != 1 or cin != out
                else nn.Identity()
            )
            self.relu = nn.ReLU(inplace=True)

        def forward(self, x: Any) -> Any:
            return self.relu(self.body(x) + self.skip(x))

    layers: list[Any] = [
        nn.Conv2d(3, width, 7, 2, 3, bias=False),
        nn.BatchNorm2d(width),
        nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, 1),
    ]
    cin = width
    for stage, count in enumerate(blocks):
        mid = width * 2**stage
        for i in range(count):
            layers.append(Bottleneck(cin, mid, 2 if i == 0 and stage > 0 else 1))
            cin = mid * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    return nn.Sequential(*layers)


def _io(kind: str, name: str, dims: str) -> str:
    return f'{kind} [ {{ name: "{name}" data_type: TYPE_FP32 dims: [ {dims} ] }} ]\n'


def write_torch_models(torch: Any, repo: Path, p: Profile) -> Path:
    """``resnet``, ``resnet_dyn`` and ``sum_input`` into ``repo``; the TorchScript file's path (the
    plain loop loads the same file)."""
    torch.manual_seed(0)
    net = resnet(torch, p.blocks, p.width).eval()
    with torch.no_grad():
        traced = torch.jit.trace(net, torch.rand(1, *p.input_shape))
    first: Path | None = None
    dims = ", ".join(str(d) for d in p.input_shape)
    for name, extra in (("resnet", ""), ("resnet_dyn", "dynamic_batching { }\n")):
        folder = repo / name / "1"
        folder.mkdir(parents=True, exist_ok=True)
        if first is None:
            first = folder / "model.pt"
            traced.save(str(first))
        else:
            shutil.copyfile(first, folder / "model.pt")
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "pytorch"\nmax_batch_size: {p.concurrency}\n'
            + _io("input", "INPUT__0", dims)
            + _io("output", "OUTPUT__0", "1000")
            + p.instance_group()
            + extra
        )

    class SumInput(torch.nn.Module):  # type: ignore[misc]
        def forward(self, x: Any) -> Any:
            return x.sum(dim=0, keepdim=True)

    (repo / "sum_input" / "1").mkdir(parents=True, exist_ok=True)
    torch.jit.trace(SumInput(), torch.rand(8)).save(str(repo / "sum_input" / "1" / "model.pt"))
    (repo / "sum_input" / "config.pbtxt").write_text(
        'name: "sum_input"\nbackend: "pytorch"\nmax_batch_size: 0\n'
        + _io("input", "INPUT__0", str(p.shm_mib * MIB // 4))
        + _io("output", "OUTPUT__0", "1")
        + p.instance_group()
    )
    assert first is not None
    return first


PYTHON_MODEL = '''
import torch
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """Weights on the GPU (where torch sees one), a matrix product there per request."""

    def initialize(self, args):
        device = args.get("model_instance_device_id") or "0"
        self.device = torch.device(f"cuda:{device}" if torch.cuda.is_available() else "cpu")
        g = torch.Generator().manual_seed(0)
        self.weight = torch.randn(1024, 1024, generator=g).to(self.device)  # 4 MiB

    def execute(self, requests):
        responses = []
        for request in requests:
            x = torch.from_numpy(pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy())
            y = (x.to(self.device) @ self.weight).cpu().numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", y)]))
        return responses
'''
#: the memory row's models
PYTHON_MODELS = tuple(f"gpu_python_{i}" for i in range(4))


def write_python_models(repo: Path, p: Profile, kind: str | None = None) -> None:
    """The four Python models, in threads of the server's process (``execution_mode: thread``: the
    point of the row is one process, one CUDA context)."""
    for name in PYTHON_MODELS:
        (repo / name / "1").mkdir(parents=True, exist_ok=True)
        (repo / name / "1" / "model.py").write_text(PYTHON_MODEL.lstrip())
        (repo / name / "config.pbtxt").write_text(
            f'name: "{name}"\nbackend: "python"\nmax_batch_size: 0\n'
            + _io("input", "INPUT0", "1, 1024")
            + _io("output", "OUTPUT0", "1, 1024")
            + p.instance_group(kind)
            + 'parameters { key: "execution_mode" value: { string_value: "thread" } }\n'
        )
