"""Log lines and switches: tritonserver's formats, ISO8601, JSON lines; severities; verbose levels."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest

from inferd.logs import VERBOSE1, VERBOSE2, LogSettings, in_worker, verbose


@pytest.fixture
def logger() -> logging.Logger:
    lg = logging.getLogger(f"inferd.test_logs.{id(object())}")
    lg.propagate = False
    return lg


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def test_formats(tmp_path: Path, logger: logging.Logger) -> None:
    path = tmp_path / "log"
    logs = LogSettings(log_file=str(path), logger=logger)
    logger.info("hello %s", "there")
    logs.set_format("ISO8601")
    logger.warning("careful")
    logs.set_format("json")
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")
    logs.close()
    default, iso, js = _lines(path)[:3]
    assert re.fullmatch(r'I\d{4} \d\d:\d\d:\d\d\.\d{6} \d+ test_logs\.py:\d+\] "hello there"', default)
    assert re.fullmatch(r'\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ W \d+ test_logs\.py:\d+\] "careful"', iso)
    doc = json.loads(js)
    assert (doc["level"], doc["message"], doc["file"]) == ("ERROR", "failed", "test_logs.py")
    assert "ValueError: boom" in doc["exception"] and doc["time"].endswith("+00:00")
    assert logs.settings() == {
        "log_file": str(path),
        "log_info": True,
        "log_warning": True,
        "log_error": True,
        "log_verbose_level": 0,
        "log_format": "json",
    }


def test_severities_and_verbose_levels(tmp_path: Path, logger: logging.Logger) -> None:
    path = tmp_path / "log"
    logs = LogSettings(log_file=str(path), logger=logger)
    logger.log(VERBOSE1, "v1 hidden")
    logs.set_verbose(1)
    logger.log(VERBOSE1, "v1 shown")
    logger.log(VERBOSE2, "v2 hidden")
    logs.set_verbose(2)
    logger.log(VERBOSE2, "v2 shown")
    logs.set_severities(info=False, error=False)
    logger.info("info hidden")
    logger.log(VERBOSE1, "verbose hidden with info off")
    logger.warning("warning shown")
    logger.error("error hidden")
    logs.close()
    messages = [json.loads(line.split("] ", 1)[1]) for line in _lines(path)]
    assert messages == ["v1 shown", "v2 shown", "warning shown"]


FORGED = 'x"\nE1127 17:00:00.000000 1 server.py:1] "the server is compromised"\x1b[2J\\'


def test_messages_are_escaped_as_the_references_so_no_record_can_be_forged(
    tmp_path: Path, logger: logging.Logger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Triton 2.51 writes every message as a JSON string (TritonJson::SerializeString) unless
    TRITON_SERVER_ESCAPE_LOG_MESSAGES=0: a client's text with a newline and a whole record in it
    (an input name, say) stays inside its own line, and an ANSI sequence stays text."""
    path = tmp_path / "log"
    logs = LogSettings(log_file=str(path), logger=logger)
    logger.warning("input '%s' is unknown", FORGED)
    try:
        raise ValueError(FORGED)
    except ValueError:
        logger.exception("the model failed")
    logs.set_format("ISO8601")
    logger.warning("%s", "é 東京 \t")
    logs.close()
    lines = _lines(path)
    assert len(lines) == 3  # nothing a message held started a line of its own
    assert lines[0].endswith(
        '] "input \'x\\"\\nE1127 17:00:00.000000 1 server.py:1] \\"the server is compromised\\"'
        "\\u001b[2J\\\\' is unknown\""
    )
    assert json.loads(lines[0].split("] ", 1)[1]) == f"input '{FORGED}' is unknown"
    traceback = json.loads(lines[1].split("] ", 1)[1])
    assert traceback.startswith("the model failed\nTraceback") and traceback.endswith(f"ValueError: {FORGED}")
    assert lines[2].endswith('] "é 東京 \\t"')  # non-ASCII as it is, as rapidjson writes it

    monkeypatch.setenv("TRITON_SERVER_ESCAPE_LOG_MESSAGES", "0")  # the reference's switch, read at start
    raw = tmp_path / "raw"
    logs = LogSettings(log_file=str(raw), logger=logger)
    logger.warning("plain %s", "text")
    logs.close()
    assert _lines(raw)[0].endswith("] plain text")


def test_verbose_asks_the_inferd_logger() -> None:
    inferd = logging.getLogger("inferd")
    old = inferd.level
    try:
        inferd.setLevel(VERBOSE1)
        assert verbose(1) and not verbose(2)
        inferd.setLevel(logging.INFO)
        assert not verbose(1)
    finally:
        inferd.setLevel(old)


def test_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="invalid argument for --log-format, got: xml"):
        LogSettings(log_format="xml", attach=False)


def test_a_worker_process_logs_as_the_server(tmp_path: Path, logger: logging.Logger) -> None:
    """A worker (backends/process/) starts with the server's file, format and switches (its
    ``settings()``, handed down as ``ServerLinks.log_settings``): a Python model's Logger lines go
    where the server's go, as the server writes them."""
    path = tmp_path / "log"
    server = LogSettings(log_file=str(path), log_format="json", verbose=1, warning=False, logger=logger)
    settings = server.settings()
    assert settings["log_file"] == str(path)
    worker_logger = logging.getLogger(f"{logger.name}.worker")
    worker_logger.propagate = False
    worker = in_worker(settings, logger=worker_logger)
    worker_logger.debug("verbose %s", "shown")
    worker_logger.warning("a warning, switched off")
    worker.close()
    server.close()
    assert [json.loads(line)["message"] for line in _lines(path)] == ["verbose shown"]
    gone = in_worker({**settings, "log_file": str(tmp_path / "no" / "such" / "dir")}, logger=worker_logger)
    assert gone.log_file == "" and gone.format == "json"
