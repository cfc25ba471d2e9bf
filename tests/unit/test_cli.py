"""The command line: tritonserver's flag forms, the options they give, the model table, log lines."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import re
from pathlib import Path

import pytest

from inferd import __version__
from inferd.cli import TritonFormatter, build_parser, format_table, main, options_from_args, serve
from inferd.compat_flags import DEPRECATED_TRACE, IGNORED
from inferd.options import FLAG_GROUPS, ServerOptions


def parse(*argv: str) -> ServerOptions:
    return options_from_args(build_parser().parse_args(["serve", *argv]))


def test_defaults_are_tritonservers() -> None:
    opts = parse("--model-repository", "/models")
    assert opts == ServerOptions(model_repository=[Path("/models")])
    assert opts.strict_readiness and opts.exit_on_error and not opts.strict_model_config
    assert (opts.http_port, opts.grpc_port, opts.metrics_port) == (8000, 8001, 8002)
    assert opts.exit_timeout_secs == 30 and opts.model_load_thread_count == 4


def test_repeated_model_repository_and_its_alias() -> None:
    opts = parse("--model-repository", "/a", "--model-repository=/b", "--model-store", "/c")
    assert opts.model_repository == [Path("/a"), Path("/b"), Path("/c")]
    assert parse("--model-repository=/x").model_repository == [Path("/x")]  # the default list is not shared


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        (["--exit-on-error=false"], "exit_on_error", False),
        (["--exit-on-error", "false"], "exit_on_error", False),
        (["--exit-on-error=0"], "exit_on_error", False),
        (["--exit-on-error=true"], "exit_on_error", True),
        (["--allow-http", "false"], "allow_http", False),
        (["--allow-http=False"], "allow_http", False),
        (["--allow-grpc=no"], "allow_grpc", False),
        (["--allow-metrics", "off"], "allow_metrics", False),
        (["--strict-readiness=false"], "strict_readiness", False),
        (["--strict-model-config"], "strict_model_config", True),
        (["--strict-model-config=1"], "strict_model_config", True),
        (["--strict-model-config", "yes"], "strict_model_config", True),
        (["--disable-auto-complete-config"], "strict_model_config", True),
        (["--http-port", "9000"], "http_port", 9000),
        (["--http-port=0"], "http_port", 0),
        (["--grpc-port=9001"], "grpc_port", 9001),
        (["--grpc-server=aio"], "grpc_server", "aio"),
        (["--grpc-server", "lean"], "grpc_server", "lean"),
        (["--metrics-port", "9002"], "metrics_port", 9002),
        (["--http-address=127.0.0.1"], "http_address", "127.0.0.1"),
        (["--id=inferd"], "id", "inferd"),
        (["--exit-timeout-secs=5"], "exit_timeout_secs", 5),
        (["--model-load-thread-count", "8"], "model_load_thread_count", 8),
        (["--model-config-name=h100"], "model_config_name", "h100"),
        (["--log-verbose=1"], "log_verbose", 1),
        (["--model-control-mode=none"], "model_control_mode", "none"),
        # any case, as tritonserver (Triton's qa L0_model_namespacing passes POLL and EXPLICIT)
        (["--model-control-mode=POLL"], "model_control_mode", "poll"),
        (["--model-control-mode=Explicit"], "model_control_mode", "explicit"),
    ],
)
def test_flag_forms(argv: list[str], field: str, value: object) -> None:
    opts = parse("--model-repository=/m", *argv)
    assert getattr(opts, field) == value


def test_a_bare_boolean_flag_before_another_flag() -> None:
    opts = parse("--strict-model-config", "--model-repository", "/m", "--allow-grpc", "--http-port=1")
    assert opts.strict_model_config and opts.allow_grpc and opts.http_port == 1


def subparser(command: str) -> argparse.ArgumentParser:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    sub: argparse.ArgumentParser = action.choices[command]
    return sub


FIELDS = {f.name: f for f in dataclasses.fields(ServerOptions) if f.metadata.get("cli", True)}


def test_flag_groups_list_every_flag_once() -> None:
    listed = [name for _, _, names in FLAG_GROUPS for name in names]
    assert sorted(listed) == sorted(FIELDS)  # each field with a flag, once, and nothing else


@pytest.mark.parametrize("command", ["serve", "serve-ray"])
def test_help_groups_the_flags_by_topic_and_keeps_every_flag(command: str) -> None:
    groups = {g.title: g._group_actions for g in subparser(command)._action_groups if g._group_actions}
    titles = [title for title, _, _ in FLAG_GROUPS]
    assert list(groups)[: len(titles) + 1] == ["options", *titles]  # in this order, and nothing between
    assert [a.option_strings for a in groups["options"]] == [["-h", "--help"]]  # nothing left ungrouped
    assert "other" not in groups
    for title, _, names in FLAG_GROUPS:
        assert [a.dest for a in groups[title]] == list(names)
    flags = {o for actions in groups.values() for a in actions for o in a.option_strings}
    for f in FIELDS.values():
        assert set(f.metadata.get("flags") or ["--" + f.name.replace("_", "-")]) <= flags
    compat = groups["Triton compatibility: flags accepted and ignored"]
    assert [a.option_strings[0] for a in compat] == [f.flag for f in IGNORED]
    trace = groups["Triton compatibility: deprecated trace flags"]
    assert [a.option_strings[0] for a in trace] == [f.flag for f in DEPRECATED_TRACE]


def test_help_shows_each_default_once_in_one_form(monkeypatch: pytest.MonkeyPatch) -> None:
    for f in FIELDS.values():
        assert "default:" not in f.metadata["help"], f.name  # the parser appends it, the text does not
    monkeypatch.setenv("COLUMNS", "1000")  # one line a flag's help
    parser = subparser("serve")
    text = parser.format_help()
    assert "%(" not in text and text.startswith("usage: inferd serve --model-repository PATH")
    shown = {}  # flag -> the parenthesis the parser appended to its help
    for action in parser._actions:
        if action.dest in FIELDS:
            assert action.help is not None
            last = re.search(r"\(([^()]*)\)$", action.help)
            assert last, action.help
            shown[action.option_strings[0]] = last.group(1)
    for f in FIELDS.values():
        flag = (f.metadata.get("flags") or ["--" + f.name.replace("_", "-")])[0]
        assert shown[flag].count("default:") == (0 if f.metadata.get("required") else 1), flag
    assert text.count("(default: ") + text.count("; default: ") == len(FIELDS) - 1  # shown once each
    assert shown["--model-repository"] == "required; repeatable"
    assert shown["--load-model"] == "repeatable; default: not set"
    assert shown["--rate-limit-resource"] == "repeatable; default: the most any instance asks for"
    assert shown["--exit-on-error"] == "default: true"
    assert shown["--strict-model-config"] == "default: false"
    assert shown["--model-load-timeout-secs"] == "default: 600"
    assert shown["--model-memory-budget"] == "default: not set"
    assert shown["--http-port"] == "default: 8000"
    assert shown["--metrics-address"] == "default: --http-address"
    assert shown["--log-format"] == "default: default"
    values = re.findall(r"default: ([^;)]*)\)", text)
    assert not {"None", "True", "False", "[]", "''"} & set(values)


def test_invalid_boolean(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse("--model-repository=/m", "--exit-on-error=maybe")
    assert info.value.code == 2
    assert "invalid boolean value 'maybe' (use true/false/1/0)" in capsys.readouterr().err


def test_model_repository_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        parse()
    assert info.value.code == 2
    assert "--model-repository" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"inferd {__version__}"


def test_format_table() -> None:
    table = format_table(
        ("Model", "Version", "Status"),
        [("add_sub", "1", "READY"), ("bad", "-", "UNAVAILABLE: failed to parse")],
    )
    assert table == "\n".join(
        [
            "+---------+---------+------------------------------+",
            "| Model   | Version | Status                       |",
            "+---------+---------+------------------------------+",
            "| add_sub | 1       | READY                        |",
            "| bad     | -       | UNAVAILABLE: failed to parse |",
            "+---------+---------+------------------------------+",
        ]
    )


def test_format_table_keeps_a_reason_of_several_lines_inside_its_cell() -> None:
    table = format_table(
        ("Model", "Version", "Status"),
        [("bad", "1", "UNAVAILABLE: Traceback:\n  File x\nValueError: no"), ("good", "1", "READY")],
    )
    lines = table.splitlines()
    assert len({len(line) for line in lines}) == 1  # every line as wide: the frame holds
    assert lines[3:6] == [
        "| bad   | 1       | UNAVAILABLE: Traceback: |",
        "|       |         |   File x                |",
        "|       |         | ValueError: no          |",
    ]
    assert lines[6] == "| good  | 1       | READY                   |"


def test_format_table_without_rows() -> None:
    assert format_table(("Model", "Version", "Status"), []) == "\n".join(
        [
            "+-------+---------+--------+",
            "| Model | Version | Status |",
            "+-------+---------+--------+",
            "+-------+---------+--------+",
        ]
    )


@pytest.mark.parametrize(
    ("level", "letter"),
    [(logging.INFO, "I"), (logging.WARNING, "W"), (logging.ERROR, "E"), (logging.DEBUG, "I")],
)
def test_log_lines_look_like_tritonservers(level: int, letter: str) -> None:
    record = logging.LogRecord("inferd", level, "/x/model.py", 13, "hello %s", ("there",), None)
    line = TritonFormatter().format(record)
    assert re.fullmatch(rf'{letter}\d{{4}} \d\d:\d\d:\d\d\.\d{{6}} \d+ model\.py:13\] "hello there"', line), (
        line
    )


def test_log_line_with_an_exception() -> None:
    try:
        raise ValueError("bad")
    except ValueError:
        import sys

        record = logging.LogRecord("inferd", logging.ERROR, "/x/a.py", 1, "failed", (), sys.exc_info())
    line = TritonFormatter().format(record)
    assert line.startswith("E") and '] "failed\\nTraceback (most recent call last):' in line
    assert line.endswith('ValueError: bad"') and "\n" not in line
    raw = TritonFormatter(escape=False).format(record)
    assert raw.splitlines()[0].endswith("a.py:1] failed") and "ValueError: bad" in raw


def test_serve_refuses_a_missing_repository(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "nowhere"
    rc = asyncio.run(serve(ServerOptions(model_repository=[missing], allow_http=False)))
    assert rc == 1
    assert f"error: creating server: Internal - failed to stat file {missing}" in capsys.readouterr().err
