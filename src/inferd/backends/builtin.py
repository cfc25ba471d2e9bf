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


def builtin_names() -> list[str]:
    """inferd's own backends, sorted."""
    return sorted(BUILTIN)
