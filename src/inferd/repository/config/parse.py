"""config.pbtxt read and parsed into a ModelConfig (protobuf text format)."""

from __future__ import annotations

from pathlib import Path

from google.protobuf import text_format

from inferd.errors import InternalError, InvalidArgumentError
from inferd.repository.config.schema import ModelConfig

CONFIG_FILENAME = "config.pbtxt"
CONFIG_FOLDER = "configs"


def parse_config_text(text: str, path: str) -> ModelConfig:
    """Parse protobuf text format into a ``ModelConfig``; errors name the file, line and column."""
    cfg = ModelConfig()
    try:
        text_format.Parse(text, cfg)
    except text_format.ParseError as e:
        raise InvalidArgumentError(f"failed to parse model configuration '{path}': {e}") from e
    return cfg


def load_model_config(model_dir: Path, *, config_name: str | None = None) -> tuple[ModelConfig, bool]:
    """Read ``config.pbtxt`` (or ``configs/<config_name>.pbtxt`` when given and present).

    Returns ``(config, had_file)``.  Without a file the config is empty but for ``name`` (the
    directory name), for backends that complete it themselves (Python ``auto_complete_config``).
    """
    path = model_dir / CONFIG_FILENAME
    if config_name:
        custom = model_dir / CONFIG_FOLDER / f"{config_name}.pbtxt"
        if custom.is_file():
            path = custom
    if not path.is_file():
        return ModelConfig(name=model_dir.name), False
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InvalidArgumentError(f"failed to parse model configuration '{path}': {e}") from e
    except OSError as e:
        raise InternalError(f"failed to read model configuration '{path}': {e.strerror or e}") from e
    return parse_config_text(text, str(path)), True
