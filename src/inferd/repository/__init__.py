"""The model repository, described: config.pbtxt semantics, version policies, directory scans.

Pure: this package reads the file system and loads no model.  It imports nothing from inferd
but :mod:`inferd.errors`.
"""

from inferd.repository.config import (
    CONFIG_FILENAME,
    KNOWN_PLATFORM_BACKENDS,
    ModelConfig,
    autofill_backend_fields,
    config_to_json,
    detect_backend,
    load_model_config,
    normalize_config,
    parse_config_text,
    require_io,
    validate_config,
)
from inferd.repository.scan import (
    DUPLICATE_REASON,
    DuplicateModel,
    Fingerprint,
    ModelDir,
    fingerprint,
    parse_version_dir_name,
    scan_model_dir,
    scan_repositories,
)
from inferd.repository.version_policy import ModelVersionPolicy, no_version_message, select_versions

__all__ = [
    "CONFIG_FILENAME",
    "DUPLICATE_REASON",
    "KNOWN_PLATFORM_BACKENDS",
    "DuplicateModel",
    "Fingerprint",
    "ModelConfig",
    "ModelDir",
    "ModelVersionPolicy",
    "autofill_backend_fields",
    "config_to_json",
    "detect_backend",
    "fingerprint",
    "load_model_config",
    "no_version_message",
    "normalize_config",
    "parse_config_text",
    "parse_version_dir_name",
    "require_io",
    "scan_model_dir",
    "scan_repositories",
    "select_versions",
    "validate_config",
]
