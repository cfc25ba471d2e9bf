"""cuML's ``make_classification`` / ``make_regression`` through scikit-learn's (float32, as cuML's)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
from sklearn import datasets as sk


class _Frame(pd.DataFrame):
    """A pandas frame answering cuDF's ``to_pandas()``; its slices stay such frames."""

    @property
    def _constructor(self) -> type[_Frame]:
        return _Frame

    @property
    def _constructor_sliced(self) -> type[_Series]:
        return _Series

    def to_pandas(self) -> pd.DataFrame:
        return pd.DataFrame(self)


class _Series(pd.Series):
    @property
    def _constructor(self) -> type[_Series]:
        return _Series

    @property
    def _constructor_expanddim(self) -> type[_Frame]:
        return _Frame

    def to_pandas(self) -> pd.Series:
        return pd.Series(self)


def _out(data: Any, labels: Any) -> tuple[Any, Any]:
    from . import _output_type

    data = np.asarray(data, dtype=np.float32)
    if _output_type[-1] == "cudf":
        return _Frame(data), _Series(labels)
    return data, labels


def make_classification(**kwargs: Any) -> tuple[Any, Any]:
    return _out(*sk.make_classification(**kwargs))


def make_regression(**kwargs: Any) -> tuple[Any, Any]:
    data, targets = sk.make_regression(**kwargs)
    return _out(data, targets.astype(np.float32))
