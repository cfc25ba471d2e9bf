"""The ONNX Runtime backend (``backend.py``); ``graph.py``: graph tensors, load checks; ``options.py``: session options.

Nothing is imported here: the registry imports ``backend`` (and with it onnxruntime) only when a
repository holds an ONNX model.
"""
