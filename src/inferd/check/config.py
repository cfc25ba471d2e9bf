"""One model's config, read and completed as the server does at load, every problem reported.

The steps are ``engine.repository_manager.prepare_config``'s, with the same functions: parse,
``autofill_backend_fields``, the backend's auto-complete, ``normalize_config``, the checks of
``validate_config`` (one by one: :func:`~inferd.repository.config.validate.config_checks`),
``require_io``, then the version folders and ``select_versions``. Where the server stops at the
first error, the checker goes on: ``text_format`` refusals are reported and the refused field
blanked out to read the rest, every validation check runs, and a step that cannot complete
(an unknown backend) ends this model's checks only.

A Python model's ``auto_complete_config`` runs only with ``import_python``: it imports the model's
code, which the checker otherwise never does.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf import text_format

from inferd.backends.registry import auto_gpu, backend_for
from inferd.check.files import complete_onnx
from inferd.check.positions import ConfigIndex, StructureError
from inferd.check.report import ModelReport
from inferd.errors import InferdError
from inferd.gpu.devices import NO_GPUS, SupportedGpus
from inferd.repository import (
    CONFIG_FILENAME,
    ModelConfig,
    ModelDir,
    autofill_backend_fields,
    normalize_config,
    require_io,
    select_versions,
)
from inferd.repository.config.parse import CONFIG_FOLDER
from inferd.repository.config.validate import config_checks

if TYPE_CHECKING:
    from inferd.repository.config.schema import ModelConfig

__all__ = ["CheckOptions", "ModelResult", "check_config"]

#: how many ``text_format`` refusals one file may have before the rest of it is left unread
MAX_PARSE_ERRORS = 50
_FRAMEWORK_MODULES = {"openvino": "openvino", "tensorflow": "tensorflow", "fil": "treelite"}


@dataclass(frozen=True, slots=True)
class CheckOptions:
    """What ``inferd check`` was asked (the server's flags of the same names where there is one)."""

    strict_model_config: bool = False
    config_name: str | None = None
    default_max_batch_size: int = 4
    #: run Python models' ``auto_complete_config`` (imports their model.py)
    import_python: bool = False
    #: print notes (what was not checked and why)
    verbose: bool = False
    #: the GPUs instance groups may use (the CLI passes this machine's; none by default)
    gpus: SupportedGpus = NO_GPUS
    #: ``--model-namespacing``: a name in two repositories is a model in each (ensembles use their own's)
    model_namespacing: bool = False


@dataclass(slots=True)
class ModelResult:
    """A model's completed config and what the later checks (model files, ensembles) may trust."""

    md: ModelDir
    report: ModelReport
    cfg: ModelConfig = field(default_factory=ModelConfig)  # empty when it could not be read (complete: False)
    #: completed: parsed, backend known, auto-complete done, normalised
    complete: bool = False
    #: errors other than those of single tensors (which the model-file checks leave out)
    blocking: int = 0
    #: names of the inputs and outputs whose config entry failed validation
    bad_tensors: set[str] = field(default_factory=set)
    versions: list[int] = field(default_factory=list)


def _config_path(md: ModelDir, config_name: str | None) -> Path:
    if config_name:
        custom = md.path / CONFIG_FOLDER / f"{config_name}.pbtxt"
        if custom.is_file():
            return custom
    return md.path / CONFIG_FILENAME


_ECHO = re.compile(r"^'.*?': ")


def _parse(text: str, result: ModelResult) -> ModelConfig | None:
    """``text_format.Parse`` with recovery: each refusal is reported at its line and column, and the
    field it is in is blanked out (same length, so positions hold) before the next try."""
    report = result.report
    try:
        report.index = ConfigIndex.build(text)
    except StructureError:
        report.index = None  # text_format says where: reported below
    current = text
    blanked: set[int] = set()
    for _ in range(MAX_PARSE_ERRORS):
        cfg = ModelConfig()
        try:
            text_format.Parse(current, cfg)
            return cfg
        except text_format.ParseError as e:
            line, column = e.GetLine() or 1, e.GetColumn() or 1
            message = str(e).split(" : ", 1)[-1] if e.GetLine() else str(e)
            report.at(line, column, _ECHO.sub("", message, count=1))
            result.blocking += 1
            occ = report.index.containing(report.index.offset(line, column)) if report.index else None
            if occ is None or occ.field_start in blanked:
                return None
            blanked.add(occ.field_start)
            report.suppress(occ)
            span = current[occ.field_start : occ.field_end]
            current = current[: occ.field_start] + re.sub(r"[^\n]", " ", span) + current[occ.field_end :]
    return None


def _error(result: ModelResult, message: str, base: tuple[str | int, ...] | None = None) -> None:
    result.report.config(message, base)
    result.blocking += 1


def _auto_complete(
    cfg: ModelConfig, result: ModelResult, options: CheckOptions, version_dir: Path | None
) -> bool:
    """The backend's auto-complete; False when the model's checks cannot go on."""
    md, report = result.md, result.report
    if cfg.platform == "ensemble" or options.strict_model_config:
        return True
    try:
        backend = backend_for(cfg)
    except InferdError as e:
        _error(result, e.message, ("backend",))
        return False
    find_library = getattr(backend, "find_library", None)
    if find_library is not None:  # a C/C++ backend: its library is looked for, never run here
        try:
            find_library(cfg, md.path, version_dir)
        except InferdError as e:
            _error(result, e.message, ("backend",))
            return False
        return True
    if cfg.backend == "python":
        model_py = (version_dir or md.path) / (cfg.default_model_filename or "model.py")
        if not options.import_python:
            if options.verbose and _mentions(model_py, "auto_complete_config"):
                report.file(model_py, "auto_complete_config not run (--import-python runs it)", "note")
            return True
        try:
            backend.auto_complete(
                cfg, md.path, version_dir, default_max_batch_size=options.default_max_batch_size
            )
        except Exception as e:  # the model's own code: anything may come out
            text = e.message if isinstance(e, InferdError) else f"{type(e).__name__}: {e}"
            report.file(model_py, text)
            result.blocking += 1
            return False
        return True
    module = _FRAMEWORK_MODULES.get(cfg.backend)
    if module is not None and importlib.util.find_spec(module) is None:
        if options.verbose:
            report.file(md.path, f"not auto-completed from the model: {module} is not installed", "note")
        return True
    try:
        if cfg.backend == "onnxruntime":
            complete_onnx(cfg, version_dir, options.default_max_batch_size)
        else:
            backend.auto_complete(
                cfg, md.path, version_dir, default_max_batch_size=options.default_max_batch_size
            )
    except InferdError as e:
        _error(result, e.message)
        return False
    return True


def _mentions(path: Path, word: str) -> bool:
    """Whether a file's text holds ``word`` (read, not imported)."""
    try:
        return word in path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False


def check_config(md: ModelDir, options: CheckOptions, report: ModelReport) -> ModelResult:
    """Read, complete, normalise and validate one model's config; every problem goes to ``report``."""
    result = ModelResult(md, report)
    path = _config_path(md, options.config_name)
    if path.is_file():
        report.config_path = path
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            report.file(path, f"failed to read model configuration: {e}")
            return result
        cfg = _parse(text, result)
        if cfg is None:
            return result
    else:
        cfg = ModelConfig(name=md.name)
    result.cfg = cfg
    version_dirs = [md.versions[v] for v in sorted(md.versions)]
    try:
        autofill_backend_fields(cfg, md.name, md.path, version_dirs=version_dirs)
    except InferdError as e:
        _error(result, e.message, ("backend",))
        return result
    if not _auto_complete(cfg, result, options, version_dirs[0] if version_dirs else None):
        return result
    gpus, on_gpu = options.gpus, auto_gpu(cfg, bool(options.gpus.gpus))
    mbs = options.default_max_batch_size
    try:
        normalize_config(cfg, md.name, default_max_batch_size=mbs, gpus=gpus, auto_gpu=on_gpu)
    except InferdError as e:  # the name differs from the folder's: go on under the folder's name
        _error(result, e.message, ("name",))
        cfg.name = md.name
        normalize_config(cfg, md.name, default_max_batch_size=mbs, gpus=gpus, auto_gpu=on_gpu)
    result.complete = True
    _validate(cfg, result, options.gpus)
    if cfg.platform != "ensemble" and cfg.backend != "python":
        try:
            require_io(cfg)
        except InferdError as e:
            _error(result, e.message)
    _versions(cfg, result)
    return result


def _validate(cfg: ModelConfig, result: ModelResult, gpus: SupportedGpus) -> None:
    report = result.report
    for base, check in config_checks(cfg, gpus):
        try:
            check()
        except InferdError as e:
            kind = base[0]
            if kind in ("input", "output", "instance_group") and len(base) > 1:
                index = int(base[1])
                entry = getattr(cfg, str(kind))[index]
                report.config(e.message, report.element(str(kind), entry.name, index))
                if kind != "instance_group":
                    result.bad_tensors.add(entry.name)
                    continue
            else:
                report.config(e.message, base)
            result.blocking += 1
    for index, group in enumerate(cfg.instance_group):
        occ = report.index.get(("instance_group", index, "count")) if report.index else None
        if occ is not None and _int(occ.value) < 1:  # normalisation gave it the default count
            report.config(
                f"instance group {group.name} of model {cfg.name} has count {occ.value}, which the server "
                f"reads as the default ({group.count} instance(s)): write the number of instances (>= 1)",
                ("instance_group", index, "count"),
                "warning",
            )


def _int(text: str | None) -> int:
    try:
        return int(text or "", 0)
    except ValueError:
        return 1


def _versions(cfg: ModelConfig, result: ModelResult) -> None:
    """Version folders: names that are not versions, none at all, a policy selecting none."""
    md, report = result.md, result.report
    for name in md.ignored:
        if name.isdigit():  # a number Triton does not read as a version: leading zero, or too big
            report.file(
                md.path / name,
                f"version folder '{name}' is ignored: a version is a number without leading zeros "
                "(1, 2, ...) up to 2^63-1",
                "warning",
            )
    if not md.versions:
        report.file(
            md.path,
            f"model '{md.name}' has no version folder: the server loads it from <model>/<version>/ "
            "(for example 1/)",
        )
        result.blocking += 1
        return
    policy = cfg.version_policy
    if policy.WhichOneof("policy_choice") == "specific":
        for k, version in enumerate(policy.specific.versions):
            if int(version) not in md.versions:
                report.config(
                    f"version {version} of the version policy has no folder '{version}' (the server skips it)",
                    ("version_policy", 0, "specific", 0, "versions", k),
                    "warning",
                )
    try:
        result.versions = select_versions(policy, list(md.versions), model_name=md.name)
    except InferdError as e:
        _error(result, e.message, ("version_policy",))
