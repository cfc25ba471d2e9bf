"""``pb_utils.ModelConfig`` (what ``auto_complete_config`` completes) and ``pb_utils.Logger``."""

from __future__ import annotations

import enum
import json
import logging
from typing import Any

from inferd.backends.python.pb_args import incompatible


class ModelConfig:
    """The config a model's ``auto_complete_config`` may read and complete."""

    def __init__(self, model_config: dict[str, Any] | str) -> None:
        self._cfg: dict[str, Any] = (
            json.loads(model_config) if isinstance(model_config, str) else model_config
        )

    def as_dict(self) -> dict[str, Any]:
        return self._cfg

    def set_max_batch_size(self, max_batch_size: int) -> None:
        cur = int(self._cfg.get("max_batch_size", 0))
        if cur > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {cur} which is greater than the value "
                f"{max_batch_size} set by auto-complete"
            )
        self._cfg["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        if "sequence_batching" in self._cfg:
            raise ValueError("Configuration specified scheduling_choice as 'sequence_batching'")
        self._cfg.setdefault("dynamic_batching", {})

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        self._cfg["model_transaction_policy"] = dict(transaction_policy_dict)

    def _add(self, key: str, entry: dict[str, Any]) -> None:
        if "name" not in entry:
            raise ValueError(f"{key} in auto-complete-config must contain the 'name' property")
        entry = dict(entry)
        if "dims" in entry:
            entry["dims"] = list(entry["dims"])
        lst = self._cfg.setdefault(key, [])
        for existing in lst:
            if existing["name"] == entry["name"]:
                for k, v in entry.items():
                    if k in existing and existing[k] != v and k != "name":
                        raise ValueError(
                            f"unable to load model '{self._cfg.get('name', '')}', configuration expects "
                            f"{k} {existing[k]} for {key} '{entry['name']}' but auto-complete sets {v}"
                        )
                existing.update({k: v for k, v in entry.items() if k not in existing})
                return
        lst.append(entry)

    def add_input(self, input: dict[str, Any]) -> None:
        self._add("input", input)

    def add_output(self, output: dict[str, Any]) -> None:
        self._add("output", output)


#: Logger's levels, an enum named as the reference's (``<LogLevel.INFO: 0>``)
LogLevel: Any = enum.IntEnum(
    "LogLevel", [("INFO", 0), ("WARNING", 1), ("ERROR", 2), ("VERBOSE", 3)], module="c_python_backend_utils"
)
_LEVELS = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.DEBUG}
_log = logging.getLogger("inferd.model")


def _message(func: str, message: Any) -> None:
    if not isinstance(message, str):
        raise incompatible(func, "(message: str) -> None", (message,), {})


class Logger:
    """Writes to the server log at the caller's file and line, as Triton's Logger.

    The message goes as it is: the log's formatter quotes and escapes it once, as the reference's
    does (``model.py:10] "py_add initialized"``), or leaves it bare where escaping is off.

    Levels are ``Logger.LogLevel`` values (also ``Logger.INFO`` ...); anything else is refused as
    the reference refuses it.
    """

    LogLevel = LogLevel
    INFO = LogLevel.INFO
    WARNING = LogLevel.WARNING
    ERROR = LogLevel.ERROR
    VERBOSE = LogLevel.VERBOSE

    @staticmethod
    def log(message: Any, level: Any = LogLevel.INFO) -> None:
        if not isinstance(message, str) or not isinstance(level, LogLevel):
            raise incompatible(
                "log",
                "(message: str, level: c_python_backend_utils.Logger.LogLevel = <LogLevel.INFO: 0>) -> None",
                (message, level),
                {},
            )
        _log.log(_LEVELS[int(level)], "%s", message, stacklevel=2)

    @staticmethod
    def log_info(message: Any) -> None:
        _message("log_info", message)
        _log.info("%s", message, stacklevel=2)

    @staticmethod
    def log_warn(message: Any) -> None:
        _message("log_warn", message)
        _log.warning("%s", message, stacklevel=2)

    @staticmethod
    def log_error(message: Any) -> None:
        _message("log_error", message)
        _log.error("%s", message, stacklevel=2)

    @staticmethod
    def log_verbose(message: Any) -> None:
        _message("log_verbose", message)
        _log.debug("%s", message, stacklevel=2)


# -- a model config's parts (pb_utils exports them) ------------------------------------------
def get_input_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for i in model_config.get("input", []):
        if i["name"] == name:
            return i  # type: ignore[no-any-return]
    return None


def get_output_config_by_name(model_config: dict[str, Any], name: str) -> dict[str, Any] | None:
    for o in model_config.get("output", []):
        if o["name"] == name:
            return o  # type: ignore[no-any-return]
    return None


def using_decoupled_model_transaction_policy(model_config: dict[str, Any]) -> bool:
    return bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))
