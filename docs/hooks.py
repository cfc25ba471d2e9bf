"""MkDocs hooks (mkdocs.yml, ``hooks:``): the reference's generated parts, written from the code at build time.

A page asks for a part with a marker alone on a line, an HTML comment (invisible where the page is read
unbuilt, e.g. on a forge)::

    <!-- inferd:cli serve -->        every flag of ``inferd serve`` (cli.build_parser: ServerOptions and
                                     FLAG_GROUPS of options.py, compat_flags.py), as ``--help`` says it
    <!-- inferd:cli serve-ray -->    the flags ``inferd serve-ray`` adds to those
    <!-- inferd:cli check -->        ``inferd check``'s arguments
    <!-- inferd:api inferd.Server --> a class: signature, docstring, public methods and properties
    <!-- inferd:options -->          ServerOptions' fields (``inferd.Server``'s keyword arguments)
    <!-- inferd:errors -->           the error classes with their HTTP and gRPC statuses
    <!-- inferd:http-routes -->      the KServe v2 HTTP routes of openapi.json (what /v2/openapi.json serves)
    <!-- inferd:grpc-rpcs -->        GRPCInferenceService's RPCs (tritonclient's service descriptor)
    <!-- inferd:compat-flags -->     tritonserver's flags that change nothing here, and the deprecated ones

So the flags, the API and the routes cannot drift from the code: the build writes them from it, and an
unknown marker fails the build. The functions are plain too: tests/docs/test_docs_site.py calls them.
"""

from __future__ import annotations

import argparse
import dataclasses
import html
import importlib
import inspect
import json
import re
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# the tree being documented, whatever inferd the interpreter has installed
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

MARKER = re.compile(r"^<!-- inferd:([a-z-]+)(?: ([\w.-]+))? -->$", re.MULTILINE)
#: the id prefix of each command's flags (serve's are bare: #http-port)
COMMAND_PREFIX = {"serve": "", "serve-ray": "ray-", "check": "check-"}


def text(s: str) -> str:
    """Plain text for Markdown: no HTML (``<categories>``) and no emphasis (``'*': all``)."""
    return re.sub(r"([*_\[\]`\\])", r"\\\1", html.escape(s, quote=False))


def rst(s: str) -> str:
    """A docstring's reStructuredText roles and literals as Markdown code."""
    s = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", s)
    return s.replace("``", "`")


# -- the CLI -----------------------------------------------------------------------------------------------
def subparser(command: str) -> argparse.ArgumentParser:
    from inferd.cli import build_parser

    parser = build_parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices[command]  # type: ignore[no-any-return]
    raise KeyError(command)


def documented_actions(command: str) -> Iterator[tuple[argparse._ArgumentGroup, list[argparse.Action]]]:
    """A command's argument groups with their actions, help aside; serve-ray's without serve's flags."""
    parser = subparser(command)
    shared = set()
    if command == "serve-ray":
        shared = {s for a in subparser("serve")._actions for s in a.option_strings}
    for group in parser._action_groups:
        actions = [
            a
            for a in group._group_actions
            if not isinstance(a, argparse._HelpAction) and not (set(a.option_strings) & shared)
        ]
        if actions:
            yield group, actions


def flags(command: str) -> list[str]:
    """Every option string (aliases included) of a command, as the reference page lists them."""
    return [s for _, actions in documented_actions(command) for a in actions for s in a.option_strings]


def anchor(command: str, action: argparse.Action) -> str:
    name = (action.option_strings[0] if action.option_strings else action.metavar or action.dest).lstrip("-")
    return COMMAND_PREFIX[command] + str(name).lower()


def cli_markdown(command: str) -> str:
    parser = subparser(command)
    formatter = parser._get_formatter()
    out = []
    for group, actions in documented_actions(command):
        title = str(group.title)
        out.append(f"## {title[0].upper()}{title[1:]} {{#{COMMAND_PREFIX[command]}{_slug(title)}}}\n")
        if group.description:
            out.append(f"{text(group.description[0].upper() + group.description[1:])}.\n")
        for action in actions:
            names = ", ".join(f"`{s}`" for s in action.option_strings) or f"`{action.metavar or action.dest}`"
            usage = formatter._format_action_invocation(action)
            out.append(f"### {names} {{#{anchor(command, action)}}}\n")
            out.append(f"`{usage}`\n")
            help = formatter._expand_help(action)
            out.append(f"{text(help[:1].upper() + help[1:])}\n")
            if command != "check" and action.dest in _option_fields():
                out.append(f"In Python: `inferd.Server(..., {action.dest}=...)`.\n")
    return "\n".join(out)


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")


def _option_fields() -> dict[str, dataclasses.Field[Any]]:
    from inferd.options import ServerOptions

    return {f.name: f for f in dataclasses.fields(ServerOptions)}


# -- the in-process API ------------------------------------------------------------------------------------
def _signature(name: str, func: Callable[..., Any], skip_self: bool = True) -> str:
    """``name(a: T = default, *, b) -> R`` with the annotations as written in the source."""
    sig = inspect.signature(func)
    parts = []
    star_done = False
    for i, p in enumerate(sig.parameters.values()):
        if skip_self and i == 0 and p.name in ("self", "cls"):
            continue
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if p.kind is p.VAR_POSITIONAL:
            star_done = True
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        piece = prefix + p.name
        if p.annotation is not p.empty:
            piece += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            piece += f" = {p.default!r}"
        parts.append(piece)
    returns = "" if sig.return_annotation is sig.empty else f" -> {_annotation(sig.return_annotation)}"
    return f"{name}({', '.join(parts)}){returns}"


def _annotation(a: Any) -> str:
    return a if isinstance(a, str) else getattr(a, "__name__", repr(a))


def _docstring(obj: Any) -> str:
    """A docstring as Markdown: its paragraphs, and its doctest lines as a Python block."""
    doc = inspect.getdoc(obj) or ""
    out: list[str] = []
    in_example = False
    for line in doc.splitlines():
        example = line.startswith((">>>", "..."))
        if example and not in_example:
            out.append("```pycon")
        elif not example and in_example:
            out.append("```")
        in_example = example
        out.append(line if example else rst(line))
    if in_example:
        out.append("```")
    return "\n".join(out)


def api_markdown(qualname: str) -> str:
    module, _, name = qualname.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    out = [
        f"## `{qualname}` {{#{_slug(qualname)}}}\n",
        f"```python\n{_signature(qualname, cls.__init__)}\n```\n",
    ]
    out.append(_docstring(cls) + "\n")
    for attr, value in cls.__dict__.items():
        if attr.startswith("_"):
            continue
        if isinstance(value, property):
            out.append(f"### `{name}.{attr}` {{#{_slug(name + '-' + attr)}}}\n")
            out.append(f"*property*{chr(10) * 2 + _docstring(value) if inspect.getdoc(value) else ''}\n")
        elif inspect.isfunction(value):
            out.append(f"### `{name}.{attr}()` {{#{_slug(name + '-' + attr)}}}\n")
            out.append(f"```python\n{_signature(attr, value)}\n```\n")
            doc = _docstring(value)
            if doc:
                out.append(doc + "\n")
    return "\n".join(out)


def options_markdown() -> str:
    """ServerOptions' fields: name, type, default and flag."""
    from inferd.cli import _shown_default
    from inferd.options import ServerOptions

    hints = typing.get_type_hints(ServerOptions)
    rows = ["| keyword | type | default | flag |", "| --- | --- | --- | --- |"]
    for f in dataclasses.fields(ServerOptions):
        hint = hints[f.name]
        kind = hint.__name__ if isinstance(hint, type) else str(hint)
        kind = re.sub(r"\b(typing|pathlib)\.", "", kind).replace("NoneType", "None")
        flag = "(none: `--backend-config` sets it)" if f.metadata.get("cli") is False else ""
        if not flag:
            first = (f.metadata.get("flags") or ("--" + f.name.replace("_", "-"),))[0]
            flag = f"[`{first}`](cli.md#{first.lstrip('-')})"
        default = "required" if f.metadata.get("required") else _shown_default(f)
        rows.append(f"| `{f.name}` | `{kind}` | {text(default)} | {flag} |")
    return "\n".join(rows) + "\n"


def errors_markdown() -> str:
    from inferd import errors

    classes = [
        c
        for c in vars(errors).values()
        if inspect.isclass(c) and issubclass(c, errors.InferdError) and c is not errors.InferdError
    ]
    rows = ["| exception | code | HTTP status | gRPC status |", "| --- | --- | --- | --- |"]
    for c in classes:
        rows.append(
            f"| `inferd.{c.__name__}` | `{c.code.name}` | {c.code.http_status} | `{c.code.grpc_status_name}` |"
        )
    return "\n".join(rows) + "\n"


# -- the network APIs --------------------------------------------------------------------------------------
def http_routes_markdown() -> str:
    spec = json.loads((ROOT / "src/inferd/frontends/http/openapi.json").read_text())
    rows = ["| method | path | what | access category |", "| --- | --- | --- | --- |"]
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if not isinstance(op, dict) or "summary" not in op:
                continue
            tags = ", ".join(op.get("tags", []))
            rows.append(f"| {method.upper()} | `{path}` | {text(op['summary'])} | {tags} |")
    return "\n".join(rows) + "\n"


def grpc_rpcs() -> list[Any]:
    from tritonclient.grpc import service_pb2

    return list(service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"].methods)


def grpc_rpcs_markdown() -> str:
    rows = ["| RPC | request | response |", "| --- | --- | --- |"]
    for m in grpc_rpcs():
        stream = ("stream " if m.client_streaming else "", "stream " if m.server_streaming else "")
        rows.append(f"| `{m.name}` | {stream[0]}`{m.input_type.name}` | {stream[1]}`{m.output_type.name}` |")
    return "\n".join(rows) + "\n"


def compat_markdown() -> str:
    """tritonserver's flags without a meaning here (each logged at start with why) and its deprecated
    trace flags, from compat_flags.py."""
    from inferd.compat_flags import DEPRECATED_TRACE, IGNORED

    rows = ["| flag | what inferd does with it |", "| --- | --- |"]
    for f in IGNORED:
        rows.append(f"| `{f.flag}` | ignored: {text(f.why)} |")
    for f in DEPRECATED_TRACE:
        rows.append(f"| `{f.flag}` | deprecated: read as `--trace-config {f.why}VALUE` |")
    return "\n".join(rows) + "\n"


GENERATORS: dict[str, Callable[..., str]] = {
    "compat-flags": compat_markdown,
    "cli": cli_markdown,
    "api": api_markdown,
    "options": options_markdown,
    "errors": errors_markdown,
    "http-routes": http_routes_markdown,
    "grpc-rpcs": grpc_rpcs_markdown,
}


def expand(markdown: str, where: str) -> str:
    """The page with each marker replaced by what it asks for."""

    def one(m: re.Match[str]) -> str:
        kind, arg = m.group(1), m.group(2)
        if kind not in GENERATORS:
            raise ValueError(
                f"{where}: unknown marker <!-- inferd:{kind} --> (known: {', '.join(GENERATORS)})"
            )
        return GENERATORS[kind](arg) if arg else GENERATORS[kind]()

    return MARKER.sub(one, markdown)


# -- MkDocs' events ----------------------------------------------------------------------------------------
def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    return expand(markdown, page.file.src_uri)
