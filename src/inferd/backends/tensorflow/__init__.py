"""The TensorFlow backend (``backend.py``); ``signature.py``: auto-complete and load checks; ``settings.py``: parameters.

Nothing is imported here: the registry imports ``backend`` only when a repository holds a
SavedModel, and ``backend`` imports tensorflow only when the first one loads.
"""
