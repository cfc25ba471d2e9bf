"""A stand-in for cuML (RAPIDS, a GPU library), for the FIL backend's QA model generator only
(``qa/L0_e2e/generate_example_model.py`` imports it at its top): its data sets come from
scikit-learn's generators, which cuML's mirror (the same arguments), as numpy arrays or, where the
generator asks for cuDF (categorical columns), as pandas frames that answer ``to_pandas()``.
cuML's own forests (the QA's ``cuml`` model) are not built: they raise. ``fil.sh`` puts this folder
on the generator's PYTHONPATH, never on the tests'.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from . import datasets, ensemble

__all__ = ["datasets", "ensemble", "using_output_type"]

_output_type = ["numpy"]


@contextlib.contextmanager
def using_output_type(kind: str) -> Iterator[None]:
    """cuML's context manager: the generators' output type ("numpy" or "cudf") inside it."""
    _output_type.append(kind)
    try:
        yield
    finally:
        _output_type.pop()
