"""Triton's C/C++ backends (``libtriton_<name>.so``) hosted unmodified: see ``backend.py``."""
