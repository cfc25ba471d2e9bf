"""The PyTorch backend: TorchScript ``model.pt`` and ``torch.export`` programs, one module per instance.

Backend ``pytorch``, platform ``pytorch_libtorch``. ``<version>/model.pt`` (or
``default_model_filename``) is a module saved with ``torch.jit.save``; a ``model.pt2`` saved with
``torch.export.save`` serves too (a step beyond Triton, which reads TorchScript only). torch is
imported when the first PyTorch model loads, never at start: ``pip install 'inferd[torch]'``.

Like Triton's ``libtorch`` backend this backend cannot auto-complete a config (a TorchScript
signature has no dtypes or shapes): inputs and outputs must be listed, and ``naming.py`` maps
them onto ``forward()`` with Triton's rules. What the module's signature can contradict (argument
count, ``<name>__<index>`` indices, a tuple's length; for an exported program dtypes and fixed
dimensions too) fails the load with a reason naming the tensor, not every request.

Each instance loads its own module on its device (``KIND_CPU``; ``KIND_GPU`` on ``cuda:<id>``
when torch sees that device, with a CUDA stream of its own: inputs are copied there once per
execute, outputs back to host memory, which the front ends send) and runs it in its worker thread
under ``torch.inference_mode`` (torch releases the GIL inside operators). The requests of one execute are stacked on the batch dimension, run
once and split back (``backends/batched.py``). TYPE_STRING travels as ``List[str]``, flattened, as
in Triton. torch exceptions become inferd errors where they
enter (:func:`_load_error`, :meth:`TorchInstance._call`).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from inferd.backends.base import InstanceSpec, LoadContext
from inferd.backends.batched import BatchedInstance, reshape_shape
from inferd.backends.native import NativeBackend, NativeModel, import_lazily
from inferd.backends.pytorch.naming import InputPlan, plan_inputs, plan_outputs
from inferd.backends.pytorch.settings import set_interop_threads, torch_settings
from inferd.core.request import InferRequest
from inferd.core.response import InferResponse
from inferd.core.tensor import Tensor, TensorSpec
from inferd.core.types import BF16, BYTES, DataType
from inferd.errors import InferdError, InternalError, InvalidArgumentError, UnavailableError

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

log = logging.getLogger("inferd.backends.pytorch")

DEFAULT_FILENAME = "model.pt"
EXPORT_FILENAME = "model.pt2"

#: config datatypes the backend serves -> the torch dtype's attribute name (Triton's libtorch set)
_TORCH_DTYPES = {
    "BOOL": "bool",
    "UINT8": "uint8",
    "INT8": "int8",
    "INT16": "int16",
    "INT32": "int32",
    "INT64": "int64",
    "FP16": "float16",
    "FP32": "float32",
    "FP64": "float64",
    "BF16": "bfloat16",
    "BYTES": "",  # TYPE_STRING: a List[str] argument or return, as Triton's backend passes strings
}


def _torch() -> Any:
    """torch, imported on first use."""
    return import_lazily("torch", "pytorch", "torch")


def model_path(config: ModelConfig, version_dir: Path) -> Path:
    """``<version>/<default_model_filename>``; a lone ``model.pt2`` serves when ``model.pt`` is absent."""
    name = config.default_model_filename or DEFAULT_FILENAME
    path = version_dir / name
    if not path.is_file() and name == DEFAULT_FILENAME and (version_dir / EXPORT_FILENAME).is_file():
        path = version_dir / EXPORT_FILENAME
    if not path.is_file():
        raise UnavailableError(
            f"unable to find '{path}' for model '{config.name}': the version folder must hold a TorchScript "
            f"module saved with torch.jit.save as '{name}', or a torch.export program saved with "
            f"torch.export.save as '{EXPORT_FILENAME}'"
        )
    return path


def _load_error(e: Exception, path: Path, model: str) -> InferdError:
    """A torch load failure as the reason the model table shows."""
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    text = text.split(". This is an internal")[0]  # torch's miniz advice repeats what follows here
    if path.suffix == ".pt2":
        advice = (
            "save the program with torch.export.save(torch.export.export(model, example_inputs), 'model.pt2')"
        )
    else:
        advice = (
            "save the module with torch.jit.save(torch.jit.script(model), 'model.pt') (or torch.jit.trace); "
            "torch.save(model) and state_dicts are not TorchScript"
        )
    return InvalidArgumentError(
        f"unable to load model '{model}': '{path}' is not a loadable "
        f"{'torch.export program' if path.suffix == '.pt2' else 'TorchScript module'} ({text}): {advice}"
    )


# --------------------------------------------------------------------------------------------------
# The module and its signature


@dataclass(slots=True)
class _Program:
    """A loaded module and what its signature says."""

    module: Any
    exported: bool
    forward_args: list[str]
    arg_kinds: list[str]  # TorchScript type kinds ("TensorType", "ListType"); empty when unknown
    dict_input: bool
    returned: int | None  # tensors returned, when the signature says
    placeholders: list[Any]  # exported programs: the fake tensor of each user input


def _load_program(torch: Any, path: Path, device: str, model: str) -> _Program:
    try:
        if path.suffix == ".pt2":
            ep = torch.export.load(str(path))
            module = ep.module()
            if device != "cpu":
                module = module.to(device)
        else:
            ep = None
            module = torch.jit.load(str(path), map_location=device)
            module.eval()
    except Exception as e:
        raise _load_error(e, path, model) from e
    if ep is not None:
        return _export_signature(torch, ep, module)
    return _script_signature(module, path, model)


def _script_signature(module: Any, path: Path, model: str) -> _Program:
    forward = getattr(module, "forward", None)
    schema = getattr(forward, "schema", None)
    if schema is None:
        raise InvalidArgumentError(f"unable to load model '{model}': '{path}' has no forward() method")
    args = list(schema.arguments)[1:]  # without self
    kinds = [a.type.kind() for a in args]
    dict_input = len(args) == 1 and kinds[0] == "DictType"
    if not dict_input:
        for a, kind in zip(args, kinds, strict=True):
            if kind not in ("TensorType", "ListType"):
                raise InvalidArgumentError(
                    f"unable to load model '{model}': forward() argument '{a.name}' is {a.type}; the pytorch "
                    "backend passes tensors (or one Dict[str, Tensor] holding every input)"
                )
    returned: int | None = None
    if len(schema.returns) == 1:
        rtype = schema.returns[0].type
        if rtype.kind() == "TensorType":
            returned = 1
        elif rtype.kind() == "TupleType":
            returned = len(rtype.elements())
    return _Program(module, False, [a.name for a in args], kinds, dict_input, returned, [])


def _export_signature(torch: Any, ep: Any, module: Any) -> _Program:
    user = torch.export.graph_signature.InputKind.USER_INPUT
    names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == user]
    by_name = {n.name: n for n in ep.graph.nodes if n.op == "placeholder"}
    metas = [by_name[n].meta.get("val") if n in by_name else None for n in names]
    return _Program(module, True, names, [], False, None, metas)


def _check_exported_inputs(
    torch: Any, model: str, program: _Program, inputs: list[TensorSpec], plan: InputPlan, batching_on: bool
) -> None:
    """An exported program records dtypes and shapes: a config that contradicts them fails the load."""
    for spec in inputs:
        fake = program.placeholders[plan.index[spec.name]]
        if fake is None or not hasattr(fake, "dtype") or spec.datatype is BYTES:
            continue
        want = getattr(torch, _TORCH_DTYPES[spec.datatype.wire])
        where = f"unable to load model '{model}': input '{spec.name}'"
        if fake.dtype != want:
            raise InvalidArgumentError(
                f"{where} is {spec.datatype.config} in the configuration, but the program takes {fake.dtype}"
            )
        shape = list(fake.shape)
        dims = list(spec.reshape if spec.reshape is not None else spec.dims)
        api = ([-1] if batching_on else []) + dims
        if len(shape) != len(api):
            raise InvalidArgumentError(
                f"{where} has {len(api)} dimension(s) in the configuration "
                f"({'batch + ' if batching_on else ''}{dims}), but the program takes {len(shape)} ({shape})"
            )
        for axis, (d, s) in enumerate(zip(api, shape, strict=True)):
            if not isinstance(s, int):
                continue  # a dynamic dimension (torch.export.Dim) takes any size
            if batching_on and axis == 0:
                raise InvalidArgumentError(
                    f"{where}: the program was exported with a fixed first dimension {s}, but max_batch_size > 0 "
                    "batches along it: export with dynamic_shapes={'<arg>': {0: torch.export.Dim('batch')}}, or "
                    "set max_batch_size: 0"
                )
            if d != s:
                raise InvalidArgumentError(
                    f"{where} dimension {axis} is {d} in the configuration, but the program was exported with a "
                    f"fixed {s}"
                )


# --------------------------------------------------------------------------------------------------
# The backend


class TorchModel(NativeModel):
    """A loaded model.pt / model.pt2 version: checks the config, then loads a module per instance."""

    find = staticmethod(model_path)

    def import_framework(self) -> None:
        self.torch = _torch()

    def unserved(self, datatype: DataType) -> str | None:
        if datatype.wire in _TORCH_DTYPES:
            return None
        return (
            f"has datatype {datatype.config}, which the pytorch backend does not serve (it serves TYPE_BOOL, "
            "TYPE_UINT8, TYPE_INT8 to TYPE_INT64, TYPE_FP16, TYPE_FP32, TYPE_FP64, TYPE_BF16 and TYPE_STRING)"
        )

    def __init__(self, ctx: LoadContext) -> None:
        super().__init__(ctx)
        self.settings = torch_settings(ctx.config, self.instance_count)
        if self.settings.inter_op_threads is not None:
            set_interop_threads(self.torch, self.settings.inter_op_threads)
        self.input_plan: InputPlan | None = None
        self.output_index: dict[str, int] = {}
        self._lock = threading.Lock()
        self.modules = 0

    def device_for(self, spec: InstanceSpec) -> str:
        """The torch device of an instance: ``cpu``, or ``cuda:<id>`` for ``KIND_GPU``."""
        if spec.kind != "GPU":
            return "cpu"
        cuda = self.torch.cuda
        if not cuda.is_available():
            raise UnavailableError(
                f"unable to load model '{self.name}': instance '{spec.name}' is KIND_GPU, but torch "
                f"{self.torch.__version__} finds no CUDA device (a CPU-only build, or no GPU here): "
                "use instance_group [ { kind: KIND_CPU } ]"
            )
        if spec.device_id >= cuda.device_count():
            raise UnavailableError(
                f"unable to load model '{self.name}': instance '{spec.name}' asks for GPU {spec.device_id}, "
                f"but torch finds {cuda.device_count()} CUDA device(s)"
            )
        return f"cuda:{spec.device_id}"

    def _check(self, program: _Program) -> None:
        """Map the config onto the module's signature (once per model) or fail the load."""
        plan = plan_inputs(self.name, [i.name for i in self.inputs], program.forward_args, program.dict_input)
        if not plan.as_dict:
            for spec in self.inputs:
                if spec.optional:
                    raise InvalidArgumentError(
                        f"unable to load model '{self.name}': input '{spec.name}' is optional, but forward() "
                        "takes positional tensors: only a forward(self, inputs: Dict[str, Tensor]) can do "
                        "without an input"
                    )
        for spec in self.inputs if not plan.as_dict and program.arg_kinds else ():
            position = plan.index[spec.name]
            kind, arg = program.arg_kinds[position], program.forward_args[position]
            if (spec.datatype is BYTES) != (kind == "ListType"):
                takes = "a List[str]" if kind == "ListType" else "a Tensor"
                raise InvalidArgumentError(
                    f"unable to load model '{self.name}': input '{spec.name}' is {spec.datatype.config} in the "
                    f"configuration, but forward() argument '{arg}' takes {takes}: TYPE_STRING inputs go to "
                    "List[str] arguments, every other type to Tensor arguments"
                )
        self.output_index = plan_outputs(self.name, [o.name for o in self.outputs], program.returned)
        if program.exported:
            _check_exported_inputs(self.torch, self.name, program, self.inputs, plan, self.max_batch_size > 0)
        self.input_plan = plan

    def create_instance(self, spec: InstanceSpec) -> TorchInstance:
        device = self.device_for(spec)
        program = _load_program(self.torch, self.path, device, self.name)
        with self._lock:
            if self.input_plan is None:
                self._check(program)
            self.modules += 1
        log.info(
            "model '%s' version %s: %s for instance %s on %s (%d intra-op thread(s))",
            self.name,
            self.version_str,
            "exported program" if program.exported else "TorchScript module",
            spec.name,
            device,
            self.settings.intra_op_threads,
        )
        return TorchInstance(self, program, spec.name, device)

    def unload(self) -> None:
        """Nothing held here: each instance owns its module and drops it at its own unload."""


class PyTorchBackend(NativeBackend):
    """Backend ``pytorch``."""

    name = "pytorch"
    model_type = TorchModel

    def gpu_available(self) -> bool:
        """Whether torch is installed and sees a CUDA device (a CPU-only build does not)."""
        try:
            torch = _torch()
        except UnavailableError:
            return False  # the load says what to install
        return bool(torch.cuda.is_available())

    def auto_complete(
        self,
        config: ModelConfig,
        model_dir: Path,
        version_dir: Path | None,
        *,
        default_max_batch_size: int = 4,
    ) -> None:
        """Nothing to complete from a TorchScript module (as Triton): inputs and outputs must be listed."""
        for kind, listed in (("input", len(config.input)), ("output", len(config.output))):
            if listed == 0:
                raise InvalidArgumentError(
                    f"model configuration for '{config.name}' must specify one or more '{kind}': the pytorch "
                    "backend cannot read tensors from a TorchScript module; list them in config.pbtxt, named "
                    "after the arguments of forward() or INPUT__0, INPUT__1, ... and OUTPUT__0, OUTPUT__1, ..."
                )


class TorchInstance(BatchedInstance):
    """One module on one device; ``execute`` runs in the instance's worker thread."""

    #: never inline: inline mode is opt-in, on measurement, and torch modules were not measured for it
    inline_ok = False
    model: TorchModel

    def __init__(self, model: TorchModel, program: _Program, name: str, device: str) -> None:
        assert model.input_plan is not None
        super().__init__(model, name)
        self.program = program
        self.device = device
        self.torch = model.torch
        self._plan = model.input_plan
        self._dtypes = {
            s.name: getattr(self.torch, _TORCH_DTYPES[s.datatype.wire])
            for s in model.inputs + model.outputs
            if s.datatype is not BYTES
        }
        self._threads_set: set[int] = set()
        #: a GPU instance's own CUDA stream (the reference's libtorch backend gives each instance one):
        #: its copies and kernels queue there, so instances on one GPU overlap; None on the CPU
        self._stream: Any = self.torch.cuda.Stream(device=device) if device != "cpu" else None
        #: the CUDA ordinal of a GPU instance (inputs already there are read in place), None on the CPU
        self._cuda_index: int | None = int(device.split(":")[1]) if device.startswith("cuda:") else None

    # -- execute ----------------------------------------------------------------------------
    def execute(self, requests: list[InferRequest]) -> list[InferResponse]:
        ident = threading.get_ident()
        if ident not in self._threads_set:  # torch's intra-op setting holds per calling thread
            self.torch.set_num_threads(self.model.settings.intra_op_threads)
            self._threads_set.add(ident)
        if self._stream is None:
            return super().execute(requests)
        # inputs go to the device once (stacked: _arguments), outputs come back to host memory
        # (_to_numpy: .cpu() waits for this stream), all on the instance's stream and device
        with self.torch.cuda.stream(self._stream):
            return super().execute(requests)

    def _group_inputs(self, requests: list[InferRequest], wanted: list[frozenset[str]]) -> Any:
        return self._arguments(requests)

    def _group_run(self, prepared: Any) -> Any:
        return self._call(prepared)

    def _group_outputs(
        self, requests: list[InferRequest], result: Any, wanted: list[frozenset[str]]
    ) -> list[list[Tensor]]:
        return self._split_outputs(requests, self._output_arrays(requests, result, wanted), wanted)

    def _arguments(self, requests: list[InferRequest]) -> Any:
        torch = self.torch
        named: dict[str, Any] = {}
        lone = requests[0] if len(requests) == 1 and self._cuda_index is not None else None
        for spec in self.model.inputs:
            if lone is not None:
                on_device = self._on_device(lone, spec)
                if on_device is not None:
                    named[spec.name] = on_device
                    continue
            arr = self._stacked(requests, spec)
            if arr is None:
                continue  # an optional input left out (dict inputs only)
            if not arr.flags.writeable:
                # received bytes are read-only; torch has no read-only tensors and a module may write
                # its inputs in place (Triton's backend copies every input into a torch buffer too)
                arr = arr.copy()
            if spec.datatype is BYTES:
                named[spec.name] = _to_strings(arr, spec.name)
                continue
            if spec.datatype is BF16:
                tensor = torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
            else:
                tensor = torch.from_numpy(arr)
            if self.device != "cpu":
                tensor = tensor.to(self.device, non_blocking=True)
            named[spec.name] = tensor
        if self._plan.as_dict:
            return named
        args: list[Any] = [None] * self._plan.arity
        for name, tensor in named.items():
            args[self._plan.index[name]] = tensor
        return args

    def _on_device(self, request: InferRequest, spec: TensorSpec) -> Any:
        """An input already in this instance's GPU memory (CUDA shared memory) as a torch tensor over
        that memory, without a copy (as the reference's backend reads it in place); None otherwise."""
        t = request.inputs.get(spec.name)
        dev = None if t is None else t.device
        if dev is None or t is None or t.raw is not None or dev.device_id != self._cuda_index:
            return None
        if spec.datatype is BYTES:
            return None
        flat = self.torch.as_tensor(dev, device=self.device).reshape(-1)
        shape = t.shape
        if spec.reshape is not None:
            shape = reshape_shape(shape, spec.dims, spec.reshape, self._batching)
        return flat.view(self._dtypes[spec.name]).reshape(shape)

    def _call(self, args: Any) -> Any:
        torch = self.torch
        grad = torch.inference_mode() if self.model.settings.inference_mode else torch.no_grad()
        optimized = (
            torch.jit.optimized_execution(False)
            if not self.model.settings.optimized_execution and not self.program.exported
            else contextlib.nullcontext()
        )
        try:
            with grad, optimized:
                if self._plan.as_dict:
                    return self.program.module(args)
                return self.program.module(*args)
        except Exception as e:
            text = str(e).strip()
            raise InternalError(f"PyTorch execute failure in model '{self.model.name}': {text}") from e

    def _pick(self, result: Any, name: str) -> Any:
        """The tensor for config output ``name`` out of what forward() returned."""
        if isinstance(result, dict):
            if name not in result:
                raise InternalError(
                    f"model '{self.model.name}' returned a dict without output '{name}' "
                    f"(keys: {', '.join(map(str, result))}): return a key per config output"
                )
            return result[name]
        index = self.model.output_index[name]
        if isinstance(result, tuple) or (isinstance(result, list) and not _is_strings(result)):
            items = result
        else:  # one tensor, or one List[str] (a string output, not a list of outputs)
            items = (result,)
        if index >= len(items):
            raise InternalError(
                f"output '{name}' is index {index}, but model '{self.model.name}' returned {len(items)} "
                "output(s): the config lists more outputs than forward() returns"
            )
        return items[index]

    def _to_numpy(self, name: str, value: Any, batch: int) -> np.ndarray[Any, Any]:
        torch = self.torch
        spec = self._outputs[name]
        if spec.datatype is BYTES:
            return self._from_strings(spec, value, batch)
        if not isinstance(value, torch.Tensor):
            raise InternalError(
                f"output '{name}' of model '{self.model.name}' is a {type(value).__name__}, not a tensor"
            )
        if value.dtype != self._dtypes[name]:
            raise InternalError(
                f"output '{name}' of model '{self.model.name}' is {value.dtype}, but the configuration says "
                f"{spec.datatype.config}: change data_type in config.pbtxt or cast in forward()"
            )
        value = value.detach()
        if value.device.type != "cpu":
            value = value.cpu()
        if spec.datatype is BF16:
            return np.asarray(value.view(torch.int16).numpy().view(np.uint16))
        return np.asarray(value.numpy())

    def _output_arrays(
        self, requests: list[InferRequest], result: Any, wanted: list[frozenset[str]]
    ) -> Iterator[tuple[TensorSpec, np.ndarray[Any, Any]]]:
        """The outputs some request of the group asked for, in config order, as numpy."""
        total = sum(r.batch_size for r in requests)
        for name in self._output_names:
            if not any(name in w for w in wanted):
                continue
            yield self._outputs[name], self._to_numpy(name, self._pick(result, name), total)

    def _from_strings(self, spec: TensorSpec, value: Any, batch: int) -> np.ndarray[Any, Any]:
        """A returned List[str] as a BYTES array of the config's shape (the batch first)."""
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, (str, bytes)) for v in value):
            raise InternalError(
                f"output '{spec.name}' of model '{self.model.name}' is TYPE_STRING in the configuration, but "
                f"forward() returned a {type(value).__name__}: return a List[str]"
            )
        out = np.empty(len(value), dtype=np.object_)
        for i, v in enumerate(value):
            out[i] = v.encode("utf-8") if isinstance(v, str) else bytes(v)
        dims = list(spec.reshape if spec.reshape is not None else spec.dims)
        shape = ([batch] if self._batching else []) + dims
        if sum(1 for d in shape if d == -1) > 1 or (-1 not in shape and int(np.prod(shape)) != len(value)):
            raise InternalError(
                f"output '{spec.name}' of model '{self.model.name}' returned {len(value)} string(s), which do "
                f"not fill its shape {shape}"
            )
        return out.reshape(shape)  # the framework's shape: the caller maps a reshape back to dims

    def unload(self) -> None:
        self.program.module = None


def _is_strings(value: list[Any]) -> bool:
    return bool(value) and all(isinstance(v, (str, bytes)) for v in value)


def _to_strings(arr: np.ndarray[Any, Any], name: str) -> list[str]:
    """BYTES elements as the List[str] a TorchScript module takes (UTF-8 text, flattened)."""
    out = []
    for i, v in enumerate(arr.reshape(-1)):
        if isinstance(v, (bytes, bytearray, memoryview)):
            try:
                out.append(bytes(v).decode("utf-8"))
            except UnicodeDecodeError:
                raise InvalidArgumentError(
                    f"input '{name}' element {i} is not UTF-8 text, which a TorchScript List[str] holds"
                ) from None
        else:
            out.append(str(v))
    return out
