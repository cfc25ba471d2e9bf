"""inferd: a Triton-compatible inference server in Python."""

__version__ = "0.1.0"
