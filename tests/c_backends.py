"""The C/C++ backends of inferd's tests (tests/fixtures/c_backends/), built with the system's compiler.

``host()`` builds inferd's Triton backend host (``make install`` in the package's native folder) once
per test session into a folder of its own (``sanitize=True``: the AddressSanitizer/UBSan build);
``backend(name)`` builds ``libtriton_<name>.so`` from the fixture sources, linked against the host's
``libtritonserver.so`` as real backends link against Triton's (``DT_NEEDED libtritonserver.so``).
Builds are kept in a folder keyed by the sources' contents, so a second session builds nothing.
The tests skip, saying why, where no compiler is installed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from repo_paths import FIXTURES, ROOT
from waiting import wait_until

SOURCES = FIXTURES / "c_backends"
NATIVE = ROOT / "src" / "inferd" / "backends" / "tritonc" / "native"
INCLUDE = NATIVE / "include"

#: test backend -> (its source, the macros that select its behaviour)
BACKENDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "identity": ("identity.c", ()),
    "batch_sum": ("batch_sum.cc", ()),
    "repeat": ("repeat.c", ()),
    "autofill": ("autofill.c", ()),
    "bls": ("bls.c", ()),
    "accumulate": ("accumulate.c", ()),
    "crash": ("crash.c", ()),
    "fail_init": ("failing.c", ("FAIL_INITIALIZE",)),
    "fail_model_init": ("failing.c", ("FAIL_MODEL_INITIALIZE",)),
    "fail_no_execute": ("failing.c", ("NO_EXECUTE",)),
    "fail_execute": ("failing.c", ("FAIL_EXECUTE",)),
    "fail_missing_symbol": ("failing.c", ("MISSING_SYMBOL",)),
    "fail_throw": ("throwing.cc", ()),
    "late_send": ("failing.c", ("SEND_AFTER_FINAL",)),
    "no_release": ("failing.c", ("NO_FINAL_RESPONSE",)),
}


def compilers() -> tuple[str, str] | None:
    cc, cxx = shutil.which("gcc") or shutil.which("cc"), shutil.which("g++") or shutil.which("c++")
    return (cc, cxx) if cc and cxx and shutil.which("make") else None


def _digest(*paths: Path) -> str:
    h = hashlib.sha256(sys.version.encode())
    for base in paths:
        for p in sorted(base.rglob("*")) if base.is_dir() else [base]:
            if p.is_file() and "_lib" not in p.parts:
                h.update(p.name.encode())
                h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _cache() -> Path:
    folder = Path(tempfile.gettempdir()) / f"inferd-c-backends-{os.getuid()}"
    folder.mkdir(exist_ok=True)
    return folder


def require_compiler() -> tuple[str, str]:
    found = compilers()
    if found is None:
        pytest.skip("no C/C++ compiler and make here: the C backend host cannot be built")
    return found


def host(sanitize: bool = False) -> Path:
    """The folder of a built host (library and extension), built once per source state."""
    require_compiler()
    folder = _cache() / f"host-{'asan-' if sanitize else ''}{_digest(NATIVE)}"
    if not (folder / "libtritonserver.so").is_file():
        tmp = Path(tempfile.mkdtemp(dir=_cache()))
        cmd = ["make", "-s", "-C", str(NATIVE), "install", f"PREFIX={tmp}", f"PYTHON={sys.executable}"]
        if sanitize:
            cmd.append("SANITIZE=1")
        subprocess.run(cmd, check=True, capture_output=True)
        try:
            tmp.rename(folder)
        except OSError:  # another worker built it meanwhile
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def backend(name: str, sanitize: bool = False, link_host: bool = True) -> Path:
    """``libtriton_<name>.so`` built from the fixtures (``link_host``: DT_NEEDED libtritonserver.so)."""
    cc, cxx = require_compiler()
    source, macros = BACKENDS[name]
    lib_dir = host(sanitize)
    key = _digest(SOURCES, INCLUDE) + ("-asan" if sanitize else "") + ("" if link_host else "-nolink")
    out = _cache() / f"backends-{key}" / name / f"libtriton_{name}.so"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        compiler = cxx if source.endswith(".cc") else cc
        cmd = [compiler, "-shared", "-fPIC", "-O1", "-g", "-Wall", "-Wextra", "-Werror", f"-I{INCLUDE}"]
        cmd += [f"-D{m}" for m in macros]
        if sanitize:
            cmd += ["-fsanitize=address,undefined", "-fno-omit-frame-pointer"]
        tmp = out.with_suffix(f".{os.getpid()}.tmp")
        cmd += ["-o", str(tmp), str(SOURCES / source), "-pthread"]
        if link_host:
            cmd += [f"-L{lib_dir}", "-ltritonserver"]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        tmp.rename(out)
    return out


def install(name: str, folder: Path, sanitize: bool = False, as_name: str | None = None) -> Path:
    """Copy ``libtriton_<name>.so`` into ``folder`` (a model's folder, or a backend directory's
    ``<name>/``), named for backend ``as_name`` (default: its own name)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"libtriton_{as_name or name}.so"
    shutil.copyfile(backend(name, sanitize), target)
    return target


def server_env(sanitize: bool = False) -> dict[str, str]:
    """What a server process needs to find this session's host build."""
    env = {"INFERD_TRITONC_LIB": str(host(sanitize))}
    if sanitize:
        libasan = subprocess.run(
            ["gcc", "-print-file-name=libasan.so"], capture_output=True, text=True, check=True
        ).stdout.strip()
        libubsan = subprocess.run(
            ["gcc", "-print-file-name=libubsan.so"], capture_output=True, text=True, check=True
        ).stdout.strip()
        env["LD_PRELOAD"] = f"{libasan}:{libubsan}"
        # Python's own allocations are not what is checked: leaks are reported by LeakSanitizer for
        # the whole process, so it is off; every other error ends the process with its report
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=0:halt_on_error=1"
        env["UBSAN_OPTIONS"] = "halt_on_error=1:print_stacktrace=1"
    return env


def _config(path: Path, text: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "1").mkdir(exist_ok=True)
    (path / "config.pbtxt").write_text(text)


_FP32_IO = """
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""

#: the models of ``repository``: name -> config.pbtxt (after ``name: "<name>"``)
GOOD_MODELS = {
    "c_identity": f'backend: "identity"\nmax_batch_size: 8\n{_FP32_IO}',
    "c_identity_bytes": """backend: "identity"
max_batch_size: 0
input [ { name: "INPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_STRING dims: [ -1 ] } ]
""",
    "c_identity_reshape": """backend: "identity"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ]
""",
    # two instances of kind MODEL, and one of kind CPU (the backend logs each one's kind and device)
    "c_kinds": f'backend: "identity"\nmax_batch_size: 8\n{_FP32_IO}\n'
    "instance_group [ { count: 2 kind: KIND_MODEL }, { count: 1 kind: KIND_CPU } ]\n",
    "c_slow": f'backend: "identity"\nmax_batch_size: 8\n{_FP32_IO}\n'
    'parameters { key: "execute_delay_ms" value { string_value: "5000" } }\n',
    "c_batch": """backend: "batch_sum"
max_batch_size: 8
dynamic_batching { preferred_batch_size: [ 4 ] max_queue_delay_microseconds: 2000000 }
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 1 ] } ]
""",
    "c_repeat": """backend: "repeat"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] } ]
parameters { key: "delay_ms" value { string_value: "20" } }
""",
    "c_autofill": 'backend: "autofill"\n',
    # the sequence batcher in front: its START control reaches the backend as INPUT1 (echoed as OUTPUT1)
    "c_sequence": """backend: "identity"
max_batch_size: 2
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  control_input [ { name: "INPUT1" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ]
}
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 1 ] }
]
""",
    # implicit state: the running sum of a sequence, kept by the sequence batcher
    "c_accumulate": """backend: "accumulate"
max_batch_size: 2
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  state [ { input_name: "ACC_IN" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } } ]
}
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 1 ] } ]
""",
    # asks c_identity (BLS), waiting in its execute; and a model that does not exist
    "c_bls": f'backend: "bls"\nmax_batch_size: 8\n{_FP32_IO}\n'
    'parameters { key: "target" value { string_value: "c_identity" } }\n',
    "c_bls_nowhere": f'backend: "bls"\nmax_batch_size: 8\n{_FP32_IO}\n'
    'parameters { key: "target" value { string_value: "nowhere" } }\n',
    "c_fail_execute": f'backend: "fail_execute"\nmax_batch_size: 8\n{_FP32_IO}',
    "c_throw": f'backend: "fail_throw"\nmax_batch_size: 8\n{_FP32_IO}',
    "c_late_send": f'backend: "late_send"\nmax_batch_size: 8\n{_FP32_IO}',
    "c_no_final": f'backend: "no_release"\nmax_batch_size: 8\n{_FP32_IO}',
}

#: models that must not load: name -> (config, what their reason says)
BAD_MODELS = {
    "c_fail_init": (
        f'backend: "fail_init"\nmax_batch_size: 8\n{_FP32_IO}',
        "fail_init refuses to initialize",
    ),
    "c_fail_model_init": (
        f'backend: "fail_model_init"\nmax_batch_size: 8\n{_FP32_IO}',
        "fail_model_init: this model is not loadable",
    ),
    "c_no_execute": (
        f'backend: "fail_no_execute"\nmax_batch_size: 8\n{_FP32_IO}',
        "unable to find required entrypoint 'TRITONBACKEND_ModelInstanceExecute' in shared library",
    ),
    "c_missing_symbol": (
        f'backend: "fail_missing_symbol"\nmax_batch_size: 8\n{_FP32_IO}',
        "undefined symbol: TRITONSERVER_NoSuchFunction",
    ),
    "c_not_elf": (f'backend: "not_elf"\nmax_batch_size: 8\n{_FP32_IO}', "is not a shared library"),
    "c_wrong_arch": (
        f'backend: "wrong_arch"\nmax_batch_size: 8\n{_FP32_IO}',
        "is a shared library for aarch64",
    ),
    "c_nowhere": (
        f'backend: "nowhere"\nmax_batch_size: 8\n{_FP32_IO}',
        "unable to find backend library for backend 'nowhere'",
    ),
    # its folder's library (fail_model_init's, named for identity) comes before the backend directory's
    "c_shadowed": (
        f'backend: "identity"\nmax_batch_size: 8\n{_FP32_IO}',
        "fail_model_init: this model is not loadable",
    ),
}


def repository(dest: Path, sanitize: bool = False) -> tuple[Path, Path]:
    """A model repository of every test backend and a backend directory (``--backend-directory``):
    the good backends are in the backend directory, the bad ones in their model's folder or version
    folder (both places the reference looks first). Returns (repository, backend directory)."""
    repo, backends = dest / "models", dest / "backends"
    for name, text in GOOD_MODELS.items():
        _config(repo / name, f'name: "{name}"\n{text}')
    for name, (text, _) in BAD_MODELS.items():
        _config(repo / name, f'name: "{name}"\n{text}')
    for name in (
        "identity",
        "batch_sum",
        "repeat",
        "autofill",
        "bls",
        "accumulate",
        "fail_execute",
        "fail_throw",
        "late_send",
        "no_release",
    ):
        install(name, backends / name, sanitize)
    install("fail_init", repo / "c_fail_init", sanitize)
    install("fail_model_init", repo / "c_fail_model_init" / "1", sanitize)  # the version folder
    install("fail_no_execute", repo / "c_no_execute", sanitize)
    install("fail_missing_symbol", repo / "c_missing_symbol", sanitize)
    install("fail_model_init", repo / "c_shadowed", sanitize, as_name="identity")
    (repo / "c_not_elf" / "libtriton_not_elf.so").write_text("this is a text file, not a library\n")
    wrong = bytearray(backend("identity", sanitize).read_bytes())
    wrong[18:20] = (183).to_bytes(2, "little")  # e_machine: EM_AARCH64
    (repo / "c_wrong_arch" / "libtriton_wrong_arch.so").write_bytes(bytes(wrong))
    return repo, backends


def settled_stats(server: Any, model: str, successes: int) -> dict[str, Any]:
    """The model's statistics once ``successes`` requests are counted: an execute in a worker thread is
    counted when it returns, which may be a moment after its responses went (as the reference counts a
    request when its backend reports it)."""

    def stats() -> dict[str, Any] | None:
        doc: dict[str, Any] = server.request("GET", f"/v2/models/{model}/stats").json()["model_stats"][0]
        return doc if doc["inference_stats"]["success"]["count"] >= successes else None

    return wait_until(stats, f"{successes} successes of {model}", 10)
