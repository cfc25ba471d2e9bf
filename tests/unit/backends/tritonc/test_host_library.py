"""The host library (libtritonserver.so) as a backend sees it: every function the headers declare for
the host is exported, no backend entry point is, and each one inferd does not serve answers an
UNSUPPORTED error naming itself (called through ctypes with null arguments: it must not touch them)."""

from __future__ import annotations

import ctypes
import re
import subprocess
from pathlib import Path

import pytest

import c_backends

HEADERS = c_backends.INCLUDE / "triton" / "core"
UNSUPPORTED_C = c_backends.NATIVE / "host" / "unsupported.c"


def _declared() -> tuple[set[str], set[str]]:
    """(host functions, backend entry points) the headers declare."""
    server = (HEADERS / "tritonserver.h").read_text()
    backend = (HEADERS / "tritonbackend.h").read_text()
    host_part, entry_part = backend.split("provided by a backend", 1)
    names = re.compile(r"\b(TRITON(?:SERVER|BACKEND)_\w+)\s*\(")
    host = set(names.findall(server)) | set(names.findall(host_part))
    return host, set(names.findall(entry_part))


def _exported(lib: Path) -> set[str]:
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if " T " in line}


@pytest.fixture(scope="module")
def lib() -> Path:
    return c_backends.host() / "libtritonserver.so"


def test_every_host_function_is_exported_and_no_entry_point(lib: Path) -> None:
    host, entries = _declared()
    exported = _exported(lib)
    assert len(host) == 263  # the 2.51 API: 172 TRITONSERVER_ and 91 TRITONBACKEND_ host functions
    assert host - exported == set()
    assert entries & exported == set()
    # nothing else of the host's own leaks into a backend's namespace but its inferd_host_* glue
    others = {n for n in exported - host if not n.startswith("inferd_host_")}
    assert others == set(), others


def test_the_unsupported_ones_say_so_by_name(lib: Path) -> None:
    host = ctypes.CDLL(str(lib))
    code = host.TRITONSERVER_ErrorCode
    code.restype, code.argtypes = ctypes.c_int, [ctypes.c_void_p]
    message = host.TRITONSERVER_ErrorMessage
    message.restype, message.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    delete = host.TRITONSERVER_ErrorDelete
    delete.argtypes = [ctypes.c_void_p]
    stubs = re.findall(r"^STUB\((\w+),", UNSUPPORTED_C.read_text(), re.M)
    assert len(stubs) > 60
    for name in stubs:
        fn = getattr(host, name)
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_void_p] * 8
        err = fn(*([None] * 8))
        assert err, name
        assert code(err) == 5, name  # TRITONSERVER_ERROR_UNSUPPORTED
        assert message(err).decode() == f"{name} is not supported by inferd's Triton backend host"
        delete(err)


def test_errors_and_datatypes_as_the_reference_names_them(lib: Path) -> None:
    host = ctypes.CDLL(str(lib))
    new = host.TRITONSERVER_ErrorNew
    new.restype, new.argtypes = ctypes.c_void_p, [ctypes.c_int, ctypes.c_char_p]
    words = host.TRITONSERVER_ErrorCodeString
    words.restype, words.argtypes = ctypes.c_char_p, [ctypes.c_void_p]
    names = [words(new(c, b"x")).decode() for c in range(8)]
    assert names == [
        "Unknown",
        "Internal",
        "Not found",
        "Invalid argument",
        "Unavailable",
        "Unsupported",
        "Already exists",
        "Cancelled",
    ]
    dt = host.TRITONSERVER_DataTypeString
    dt.restype, dt.argtypes = ctypes.c_char_p, [ctypes.c_int]
    size = host.TRITONSERVER_DataTypeByteSize
    size.restype, size.argtypes = ctypes.c_uint32, [ctypes.c_int]
    to = host.TRITONSERVER_StringToDataType
    to.restype, to.argtypes = ctypes.c_int, [ctypes.c_char_p]
    assert [dt(i).decode() for i in range(15)][1:] == [
        "BOOL",
        "UINT8",
        "UINT16",
        "UINT32",
        "UINT64",
        "INT8",
        "INT16",
        "INT32",
        "INT64",
        "FP16",
        "FP32",
        "FP64",
        "BYTES",
        "BF16",
    ]
    assert [size(i) for i in (1, 5, 11, 13, 14)] == [1, 8, 4, 0, 2]
    assert to(b"FP32") == 11 and to(b"nope") == 0
