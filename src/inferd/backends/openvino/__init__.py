"""The OpenVINO backend (``backend.py``); ``signature.py``: auto-complete and load checks; ``settings.py``: compile properties.

Nothing is imported here: the registry imports ``backend`` only when a repository holds an
OpenVINO model, and ``backend`` imports openvino only when the first one loads.
"""
