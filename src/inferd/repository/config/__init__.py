"""config.pbtxt: parse, auto-fill, normalise, validate, and print as Triton's ``/config`` JSON.

Everything here is pure: it reads the file system at most and loads no model.  The order a
loader follows is Triton's (``InitializeModelInfo`` / ``TritonModel::Create``)::

    cfg, had_file = load_model_config(model_dir)       # parse.py
    normalize_config(cfg, name, model_dir=model_dir)   # autofill.py + normalize.py
    validate_config(cfg)                               # validate.py (+ validate_ensemble.py)
    ... backend auto-complete (Python ``auto_complete_config``) ...
    normalize_config(cfg, name)                        # idempotent: fills what auto-complete added
    validate_config(cfg); require_io(cfg)

``config_to_json`` (to_json.py) prints the result; ``schema.py`` holds ModelConfig's messages and
Triton's platform, backend and file names. The messages reproduce the wording of Triton core's
``model_config_utils.cc`` where it has one.
"""

from inferd.repository.config.autofill import autofill_backend_fields, detect_backend
from inferd.repository.config.normalize import normalize_config
from inferd.repository.config.parse import CONFIG_FILENAME, load_model_config, parse_config_text
from inferd.repository.config.schema import KNOWN_PLATFORM_BACKENDS, ModelConfig
from inferd.repository.config.to_json import config_to_json
from inferd.repository.config.validate import require_io, validate_config

__all__ = [
    "CONFIG_FILENAME",
    "KNOWN_PLATFORM_BACKENDS",
    "ModelConfig",
    "autofill_backend_fields",
    "config_to_json",
    "detect_backend",
    "load_model_config",
    "normalize_config",
    "parse_config_text",
    "require_io",
    "validate_config",
]
