"""inferd's own backends by name, where they are (``"module:factory"``): the registry creates them,
and a model whose backend is found nowhere is told their names (tritonc/search.py). Imports nothing."""

#: built-in backends: name -> "module:factory"
BUILTIN: dict[str, str] = {
    "python": "inferd.backends.python.backend:PythonBackend",
    "onnxruntime": "inferd.backends.onnxruntime.backend:OnnxRuntimeBackend",
    "pytorch": "inferd.backends.pytorch.backend:PyTorchBackend",
    "openvino": "inferd.backends.openvino.backend:OpenVinoBackend",
    "tensorflow": "inferd.backends.tensorflow.backend:TensorFlowBackend",
    "fil": "inferd.backends.fil.backend:FilBackend",
}


#: any other name: a Triton C/C++ backend or a Python-based one, found per model (python/based.py);
#: created by name like the built-in ones, so the registry depends on none of them
NAMED = "inferd.backends.python.based:NamedBackend"


def builtin_names() -> list[str]:
    """inferd's own backends, sorted."""
    return sorted(BUILTIN)
