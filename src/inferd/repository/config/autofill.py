"""Triton core's auto-fill (``AutoCompleteBackendFields``): backend, platform and model file from
the config and the first version folder, before any backend looks at the model."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from inferd.errors import InvalidArgumentError
from inferd.repository.config.schema import (
    ONNXRUNTIME_BACKEND,
    ONNXRUNTIME_FILENAME,
    ONNXRUNTIME_PLATFORM,
    OPENVINO_BACKEND,
    OPENVINO_FILENAME,
    PYTHON_BACKEND,
    PYTHON_FILENAME,
    PYTORCH_BACKEND,
    PYTORCH_FILENAME,
    PYTORCH_PLATFORM,
    TENSORFLOW_BACKEND,
    TENSORRT_BACKEND,
    TENSORRT_FILENAME,
    TENSORRT_PLATFORM,
    TF_GRAPHDEF_FILENAME,
    TF_GRAPHDEF_PLATFORM,
    TF_SAVEDMODEL_FILENAME,
    TF_SAVEDMODEL_PLATFORM,
    ModelConfig,
)

#: (backend, platform it implies or "", default model file, the file must not be a directory).
#: OpenVINO and Python have no platform name: the reference prints "platform": "" for Python.
_AUTOFILL_ORDER: tuple[tuple[str, str, str, bool], ...] = (
    (TENSORRT_BACKEND, TENSORRT_PLATFORM, TENSORRT_FILENAME, True),
    (ONNXRUNTIME_BACKEND, ONNXRUNTIME_PLATFORM, ONNXRUNTIME_FILENAME, False),  # file or directory
    (OPENVINO_BACKEND, "", OPENVINO_FILENAME, False),
    (PYTORCH_BACKEND, PYTORCH_PLATFORM, PYTORCH_FILENAME, True),
    (PYTHON_BACKEND, "", PYTHON_FILENAME, False),
)


def _first_version_dir(model_dir: Path, version_dirs: Iterable[Path] | None) -> Path | None:
    """Triton inspects the first subdirectory in name order (``std::set<std::string>``)."""
    if version_dirs is None:
        try:
            candidates = [p for p in model_dir.iterdir() if p.is_dir()]
        except OSError:
            return None
    else:
        candidates = list(version_dirs)
    if not candidates:
        return None
    return min(candidates, key=lambda p: p.name)


def _dir_contents(version_dir: Path | None) -> set[str]:
    if version_dir is None:
        return set()
    try:
        return {p.name for p in version_dir.iterdir()}
    except OSError:
        return set()


def fill_backend_fields(
    cfg: ModelConfig, model_name: str, version_dir: Path | None, *, custom_fallback: bool
) -> None:
    """Port of ``AutoCompleteBackendFields``.  ``version_dir`` None: nothing on disk to inspect."""
    if not cfg.name:
        cfg.name = model_name
    has_version = version_dir is not None
    contents = _dir_contents(version_dir)

    def is_dir(name: str) -> bool:
        return version_dir is not None and (version_dir / name).is_dir()

    def probe(filename: str, *, file_only: bool = False) -> bool:
        """Nothing in the config says; the version directory holds ``filename``."""
        if cfg.platform or cfg.default_model_filename or filename not in contents:
            return False
        return not (file_only and is_dir(filename))

    # TensorFlow: the platform is required.
    if not cfg.platform and cfg.backend in ("", TENSORFLOW_BACKEND):
        if cfg.default_model_filename == TF_SAVEDMODEL_FILENAME:
            cfg.platform = TF_SAVEDMODEL_PLATFORM
        elif cfg.default_model_filename == TF_GRAPHDEF_FILENAME:
            cfg.platform = TF_GRAPHDEF_PLATFORM
        elif not cfg.default_model_filename and has_version:
            if TF_SAVEDMODEL_FILENAME in contents and is_dir(TF_SAVEDMODEL_FILENAME):
                cfg.platform = TF_SAVEDMODEL_PLATFORM
            if TF_GRAPHDEF_FILENAME in contents and not is_dir(TF_GRAPHDEF_FILENAME):
                cfg.platform = TF_GRAPHDEF_PLATFORM
    if cfg.platform in (TF_SAVEDMODEL_PLATFORM, TF_GRAPHDEF_PLATFORM):
        if not cfg.backend:
            cfg.backend = TENSORFLOW_BACKEND
        if not cfg.default_model_filename:
            saved = cfg.platform == TF_SAVEDMODEL_PLATFORM
            cfg.default_model_filename = TF_SAVEDMODEL_FILENAME if saved else TF_GRAPHDEF_FILENAME
        return

    # Then the first of these (in Triton's order) the config names or the version directory holds.
    for backend, platform, filename, file_only in _AUTOFILL_ORDER:
        if not cfg.backend:
            named = bool(platform) and cfg.platform == platform
            if named or cfg.default_model_filename == filename or probe(filename, file_only=file_only):
                cfg.backend = backend
        if cfg.backend == backend:
            if platform and not cfg.platform:
                cfg.platform = platform
            python_runtime = backend == PYTORCH_BACKEND and cfg.runtime == PYTHON_FILENAME
            if not cfg.default_model_filename and not python_runtime:
                cfg.default_model_filename = filename
            return

    # Custom backend, only when nothing at all is given: model name 'x.<backend>'.
    if custom_fallback and not cfg.backend and not cfg.platform and not cfg.default_model_filename:
        _, dot, backend = model_name.partition(".")
        if not dot:
            raise InvalidArgumentError(
                f"Invalid model name: Could not determine backend for model '{model_name}' with no "
                "backend in model configuration. Expected model name of the form 'model.<backend_name>'."
            )
        cfg.backend = backend
        cfg.default_model_filename = f"model.{backend}"


def autofill_backend_fields(
    cfg: ModelConfig, model_name: str, model_dir: Path, *, version_dirs: Iterable[Path] | None = None
) -> None:
    """Fill ``name``, ``platform``, ``backend`` and ``default_model_filename`` as Triton core does.

    Inspects the first version directory (by name; ``version_dirs`` when given, else every
    subdirectory of ``model_dir``, as Triton does).  Raises InvalidArgumentError when no backend
    can be determined.
    """
    version_dir = _first_version_dir(model_dir, version_dirs)
    fill_backend_fields(cfg, model_name, version_dir, custom_fallback=True)


def detect_backend(model_dir: Path, version_dirs: Iterable[Path] | None = None) -> tuple[str, str]:
    """``(backend, platform)`` Triton's auto-fill gives a model directory with no config at all."""
    cfg = ModelConfig()
    autofill_backend_fields(cfg, model_dir.name, model_dir, version_dirs=version_dirs)
    return cfg.backend, cfg.platform
