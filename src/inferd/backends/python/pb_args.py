"""Argument checks of ``pb_utils`` calls, with the texts the reference's pybind11 bindings give.

Triton's ``c_python_backend_utils`` is a pybind11 module: a call whose arguments do not convert
raises ``TypeError("f(): incompatible function arguments. ...")`` naming the signature and what it
was invoked with. Models test for these (``qa/L0_backend_python/argument_validation``), so the same
calls raise the same exceptions here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_REQUIRED: Any = object()


def incompatible(
    func: str, signature: str, args: tuple[Any, ...], kwargs: dict[str, Any], constructor: bool = False
) -> TypeError:
    """pybind11's TypeError for a call that matches no overload."""
    invoked = ", ".join(repr(a) for a in args)
    if kwargs:
        invoked += ("; " if args else "") + "kwargs: " + ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
    kind = "constructor" if constructor else "function"
    return TypeError(
        f"{func}(): incompatible {kind} arguments. The following argument types are supported:\n"
        f"    1. {signature}\n\nInvoked with: {invoked}"
    )


def bind(
    names: Sequence[tuple[str, Any]], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> dict[str, Any] | None:
    """``args`` and ``kwargs`` bound to ``names`` (name, default or _REQUIRED) as pybind11 binds
    them; None when they do not fit (too many, unknown or repeated names, a required one missing)."""
    if len(args) > len(names):
        return None
    out: dict[str, Any] = {}
    for (name, _), value in zip(names, args, strict=False):
        out[name] = value
    known = {n for n, _ in names}
    for k, v in kwargs.items():
        if k not in known or k in out:
            return None
        out[k] = v
    for name, default in names:
        if name not in out:
            if default is _REQUIRED:
                return None
            out[name] = default
    return out


def is_str_list(value: Any) -> bool:
    """pybind11's ``List[str]``: a sequence (not a string) of ``str``."""
    return is_sequence(value) and all(isinstance(v, str) for v in value)


def is_sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and not isinstance(value, (str, bytes))


def is_int(value: Any) -> bool:
    return isinstance(value, int)


def is_number(value: Any) -> bool:
    """pybind11's ``float``/``double``: a Python float or int (bool included), numpy scalars too."""
    import numbers

    return isinstance(value, numbers.Real)


REQUIRED = _REQUIRED
