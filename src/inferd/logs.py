"""Logging: tritonserver's line formats, its switches, and the logging extension's settings.

One ``LogSettings`` per server owns the handler of the ``inferd`` loggers (the root logger under
``inferd serve``, so the frameworks' warnings read the same): where lines go (stderr or
``--log-file``), their format (``default``: ``I1121 22:25:21.857837 8959 file.py:13] "message"``;
``ISO8601``: ``2024-11-21T22:25:21Z I 8959 file.py:13] "message"``; beyond the reference, ``json``: one
JSON object a line for log shippers; the message escaped as a JSON string unless
``TRITON_SERVER_ESCAPE_LOG_MESSAGES=0``, as the reference's), which severities pass (``log_info``, ``log_warning``,
``log_error``) and the verbose level. Verbose lines are logged at ``VERBOSE1`` (model load steps
with their timings, every failed request with its reason, one line per request once it is answered:
``frontends/request_log.py``) and ``VERBOSE2`` (each request as it arrives, transport details);
``verbose(n)`` tells whether level n is on. The front ends ask their server's ``requests.on``
instead, once per request: a flag ``set_verbose`` keeps, where ``isEnabledFor`` is a call.

Two servers in one process keep their own switches and their own ``requests``; the loggers are
the process's (Python's), so their level is the most verbose of the servers' that share them (no
server loses its lines), and each server's front ends write request lines only when its own
``requests.on`` says so.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import weakref
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from collections.abc import Callable

    from inferd.server_config import LogConfig

#: logging levels of the verbose levels (below DEBUG's 10: nothing else logs there)
VERBOSE1 = logging.DEBUG
VERBOSE2 = 5
logging.addLevelName(VERBOSE2, "VERBOSE2")

FORMATS = ("default", "ISO8601", "json")
#: other libraries' debug lines (hpack's, a header field each: transport details) from this level on
LIBRARY_DEBUG_LEVEL = 2


class RequestLogging:
    """Whether a server's requests are logged: its front ends' one check per request
    (``LogSettings.requests``)."""

    __slots__ = ("details", "on")

    def __init__(self) -> None:
        self.on = False  # --log-verbose 1 and up: a line per request, once answered
        self.details = False  # 2 and up: each request as it arrives too


#: the reference's environment variable: 0 writes messages unescaped (the json format always escapes)
ESCAPE_ENV = "TRITON_SERVER_ESCAPE_LOG_MESSAGES"
#: every server's switches while it lives: a logger's level is the most verbose of those on it
_LIVE: weakref.WeakSet[LogSettings] = weakref.WeakSet()


def _severity(record: logging.LogRecord) -> str:
    return "I" if record.levelno < logging.WARNING else record.levelname[0]


def escape_from_environment() -> bool:
    """The reference's switch: messages are escaped unless ``TRITON_SERVER_ESCAPE_LOG_MESSAGES`` is 0."""
    return os.environ.get(ESCAPE_ENV) != "0"


class TritonFormatter(logging.Formatter):
    """``I1121 22:25:21.857837 8959 file.py:13] "message"`` as tritonserver logs (the time in UTC).

    ``escape`` (default: from the environment, as the reference): the message is written as a JSON
    string, quoted, with quotes, backslashes and control characters escaped, so that a client's or a
    model's text (an input name, an exception's message, an ANSI sequence) can never start a line of
    its own or rewrite the terminal; a traceback goes inside the same string."""

    def __init__(self, escape: bool | None = None) -> None:
        super().__init__()
        self.escape = escape_from_environment() if escape is None else escape

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC)
        return f"{_severity(record)}{ts:%m%d %H:%M:%S.%f} {record.process} {_where(record)}] {_message(self, record)}"


class Iso8601Formatter(TritonFormatter):
    """``2024-11-21T22:25:21Z I 8959 file.py:13] "message"`` (tritonserver's ``--log-format ISO8601``)."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC)
        return f"{ts:%Y-%m-%dT%H:%M:%SZ} {_severity(record)} {record.process} {_where(record)}] {_message(self, record)}"


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ``time`` (ISO 8601, microseconds), ``level``, ``logger``, ``pid``,
    ``file``, ``line``, ``message``, after an exception ``exception``, and the record's ``fields``
    (``extra={"fields": {...}}``: a table's row as keys of its own)."""

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="microseconds"),
            "level": record.levelname,
            "logger": record.name,
            "pid": record.process,
            "file": record.filename,
            "line": record.lineno,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        fields = record.__dict__.get("fields")
        if isinstance(fields, dict):
            doc.update((k, v) for k, v in fields.items() if k not in doc)
        return json.dumps(doc, ensure_ascii=False)


def _where(record: logging.LogRecord) -> str:
    return f"{record.filename}:{record.lineno}"


def _message(fmt: TritonFormatter, record: logging.LogRecord) -> str:
    msg = record.getMessage()
    if record.exc_info:
        msg += "\n" + fmt.formatException(record.exc_info)
    # rapidjson's escaping, as the reference's TritonJson::SerializeString: '"', '\\' and the control
    # characters; other text (non-ASCII included) as it is
    return json.dumps(msg, ensure_ascii=False) if fmt.escape else msg


_FORMATTERS: dict[str, type[logging.Formatter]] = {
    "default": TritonFormatter,
    "ISO8601": Iso8601Formatter,
    "json": JsonFormatter,
}


class _Severities(logging.Filter):
    """Drops the severities switched off (``log_info`` covers the verbose levels too, as Triton), and
    other libraries' debug lines below ``LIBRARY_DEBUG_LEVEL``: the reference keeps its transport's
    details for the higher levels (at level 1, hpack's field-by-field decoding was most of the log)."""

    def __init__(self) -> None:
        super().__init__()
        self.info = self.warning = self.error = True
        self.library_debug = False

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return self.error
        if record.levelno >= logging.WARNING:
            return self.warning
        if record.levelno < logging.INFO and not self.library_debug and not _ours(record.name):
            return False
        return self.info


def _ours(name: str) -> bool:
    """A logger of inferd's own (a Python model's ``pb_utils.Logger`` included)."""
    return name == "inferd" or name.startswith("inferd.")


class LogSettings:
    """The log switches of one server (the logging extension reads and changes them)."""

    def __init__(
        self,
        *,
        log_file: str | None = None,
        log_format: str = "default",
        verbose: int = 0,
        info: bool = True,
        warning: bool = True,
        error: bool = True,
        logger: logging.Logger | None = None,
        attach: bool = True,
    ) -> None:
        """``attach`` False (an embedding program keeps its own logging): the switches are kept and
        the verbose level applies to the ``inferd`` loggers, but no handler is installed."""
        if log_format not in FORMATS:
            raise ValueError(f"invalid argument for --log-format, got: {log_format}")
        self.log_file = log_file or ""
        self.logger = logger if logger is not None else logging.getLogger()
        stream: TextIO = open(log_file, "a", buffering=1) if log_file else sys.stderr  # noqa: SIM115
        self.handler = logging.StreamHandler(stream)
        self._severities = _Severities()
        self.handler.addFilter(self._severities)
        self.handler.setLevel(VERBOSE2)
        if attach:
            self.logger.handlers[:] = [self.handler]
        else:
            self.logger = logging.getLogger("inferd")
        self.format = ""
        self.verbose_level = 0
        #: whether this server's front ends log each request (``set_verbose`` keeps it)
        self.requests = RequestLogging()
        #: ``--workers``: sends the switches to the other serving processes (None: one process)
        self.propagate: Callable[..., None] | None = None
        self.set_format(log_format)
        self.set_verbose(verbose)
        self.set_severities(info=info, warning=warning, error=error)

    def close(self) -> None:
        _LIVE.discard(self)
        self._set_level()
        if self.handler in self.logger.handlers:  # no line goes to a closed file afterwards
            self.logger.removeHandler(self.handler)
        if self.log_file:  # the file this opened (a StreamHandler's close leaves its stream open)
            self.handler.close()
            self.handler.stream.close()

    # -- switches ----------------------------------------------------------------------------------
    def set_format(self, name: str) -> None:
        self.handler.setFormatter(_FORMATTERS[name]())
        self.format = name

    def set_verbose(self, level: int) -> None:
        self.verbose_level = level
        _LIVE.add(self)
        self._set_level()
        self._severities.library_debug = level >= LIBRARY_DEBUG_LEVEL
        self.requests.on = level >= 1
        self.requests.details = level >= 2

    def _set_level(self) -> None:
        """The logger's level: the most verbose of the live servers' on it (loggers are process-wide)."""
        level = max((s.verbose_level for s in list(_LIVE) if s.logger is self.logger), default=0)
        self.logger.setLevel(logging.INFO if level <= 0 else VERBOSE1 if level == 1 else VERBOSE2)

    def set_severities(
        self, *, info: bool | None = None, warning: bool | None = None, error: bool | None = None
    ) -> None:
        s = self._severities
        s.info = s.info if info is None else info
        s.warning = s.warning if warning is None else warning
        s.error = s.error if error is None else error

    def changed(self) -> None:
        """The logging extension changed the switches: the other ``--workers`` processes follow."""
        if self.propagate is not None:
            self.propagate("log_settings", self.settings())

    def apply(self, settings: dict[str, Any]) -> None:
        """Switches as ``settings()`` gives them (another ``--workers`` process's)."""
        self.set_format(settings["log_format"])
        self.set_verbose(settings["log_verbose_level"])
        self.set_severities(
            info=settings["log_info"], warning=settings["log_warning"], error=settings["log_error"]
        )

    def settings(self) -> dict[str, Any]:
        """The extension's view, in the reference's member order."""
        s = self._severities
        return {
            "log_file": self.log_file,
            "log_info": s.info,
            "log_warning": s.warning,
            "log_error": s.error,
            "log_verbose_level": self.verbose_level,
            "log_format": self.format,
        }


def in_worker(
    settings: dict[str, Any], verbose: int = 0, logger: logging.Logger | None = None
) -> LogSettings:
    """A worker process's log (on ``logger``, default the root), with the server's switches
    (their ``settings()``, which the server hands its worker processes through ``ServerLinks.log_settings``;
    empty: the defaults with ``verbose``)."""
    try:
        logs = LogSettings(log_file=settings.get("log_file") or None, verbose=verbose, logger=logger)
    except OSError:  # the file went (the server's own handle still writes): stderr rather than no log
        logs = LogSettings(verbose=verbose, logger=logger)
    if settings:
        logs.apply(settings)
    return logs


def verbose(level: int, logger: logging.Logger = logging.getLogger("inferd")) -> bool:
    """Whether verbose level ``level`` (1 or 2) is on."""
    return logger.isEnabledFor(VERBOSE1 if level <= 1 else VERBOSE2)


def from_options(config: LogConfig, *, attach: bool = True) -> LogSettings:
    """The log switches the options set (``server_config.LogConfig``; ``attach`` False: see ``LogSettings``)."""
    return LogSettings(
        log_file=config.file,
        log_format=config.format,
        verbose=config.verbose,
        info=config.info,
        warning=config.warning,
        error=config.error,
        logger=logging.getLogger("inferd") if not attach and config.file else None,
        attach=attach or bool(config.file),
    )
