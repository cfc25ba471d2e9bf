"""The code blocks of README.md, the quickstart and the tutorials run as a reader runs them, and what they
print held to what the page shows.

With ``make run`` serving (HTTP 8000, gRPC 8001, metrics 8002), from the repository's root::

    .venv/bin/python tests/readme_snippets.py                        # every page's blocks, in order
    .venv/bin/python tests/readme_snippets.py docs/quickstart.md     # one page
    .venv/bin/python tests/readme_snippets.py --http-port 9000 --grpc-port 9001 --metrics-port 9002

A page's blocks run one after the other in a folder of its own laid out as the repository is for its
reader (``examples/models``, the served repository; ``examples/python_models``, ``scripts`` and
``.tools``: links to the repository's), so what one block writes the next finds. How each block runs
(``Snippet.kind``), from its fence and the line above it:

- ``<!-- not run: why -->`` on the line above: not run (the page's install command, say);
- a fence with a title (`` ```python title="my_models/hello/1/model.py" ``): written to that file, as the
  reader saves it;
- `` ```bash `` whose command is ``inferd serve ...`` or ``tritonserver ...``: that server is started on
  port 0 (added to its flags; the ports it got read from its start-up lines) and waited for until ready; the blocks after it talk to it, and it is
  stopped (SIGTERM, exit 0) at the next one or at the page's end. Before it, blocks talk to the server
  ``make run`` starts;
- `` ```python ``: run in a process of its own (``python -c``); `` ```bash ``: run under ``bash -e``, its
  stderr with its stdout as a terminal shows them;
- any other fence (``text``, ``protobuf``, ``yaml``: output or a file's content shown) is not code.

Every block is run as written except for the ports, when the server's are not the page's
(``localhost:8000``, ``:8001`` and ``:8002`` only). What a ``print`` line writes is compared with the
output the page shows in its comment: on the same line, or in the comment lines right below it; for a
shell command, the comment lines right after it, and its own comment when that starts with no letter
(``# 200``). How a comment is read (``expected``): notes in parentheses (``(targets: 0 8 9 8)``) and after
two spaces (``  shape (3,): ...``) are not output; ``...`` stands for any output; a number matches to the
digits shown (0.7553 is 0.75533 rounded) or within 2e-5 of its value, an integer or a ``1.`` exactly.

tests/e2e/test_e2e_readme_snippets.py runs every page against servers of its own.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import tokenize
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from ports import listening_ports
from waiting import read_text, wait_until

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: the pages whose code blocks run: the front page, the quickstart and the tutorials
PAGES = [README, ROOT / "docs" / "quickstart.md", *sorted((ROOT / "docs" / "tutorials").glob("*.md"))]
PAGE_PORTS = {"http": 8000, "grpc": 8001, "metrics": 8002}

#: (HTTP, gRPC, metrics) ports
Ports = tuple[int, int, int]
#: starts ``inferd ARGS`` (ARGS: "serve ..." or "tritonserver ...", its ports added) in a folder, ready
Serve = Callable[[list[str], Path], AbstractContextManager[Ports]]

_FENCE = re.compile(r"^```(\w*)([^\n]*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)
_NOT_RUN = re.compile(r"<!-- not run: (.+?) -->\s*$")
_TITLE = re.compile(r'\btitle="([^"]+)"')
_SERVE = re.compile(r"^(?:\.venv/bin/)?(inferd\s+serve|tritonserver)\b")


@dataclass(frozen=True)
class Snippet:
    """A fenced code block of a page: its language, the page line of its first line, its text, the file
    it is saved as (its fence's title), and why it does not run (the line above it)."""

    lang: str
    line: int
    code: str
    page: Path = README
    title: str = ""
    skip: str = ""

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page}:{self.line}"

    @property
    def kind(self) -> str:
        """One of skip, file, serve, python, bash, or "" (not code: output, a config shown)."""
        if self.skip:
            return "skip"
        if self.title:
            return "file"
        if self.lang == "bash" and _SERVE.match(self.code):
            return "serve"
        return self.lang if self.lang in ("python", "bash") else ""

    def with_ports(self, http: int, grpc: int, metrics: int = PAGE_PORTS["metrics"]) -> str:
        """The code with another server's ports in place of the page's (nothing else changes)."""
        code = self.code
        for name, port in (("http", http), ("grpc", grpc), ("metrics", metrics)):
            code = code.replace(f"localhost:{PAGE_PORTS[name]}", f"localhost:{port}")
        return code

    def serve_args(self) -> list[str]:
        """A serve block's command after ``inferd`` (``serve ...`` or ``tritonserver ...``)."""
        words = shlex.split(self.code, comments=True)
        if words[0].endswith("inferd"):
            words = words[1:]
        return words


def snippets(lang: str | None = None, page: Path = README) -> list[Snippet]:
    """A page's blocks (of ``lang`` if given) that start at the left margin (indented ones belong to a
    list item's or an admonition's text)."""
    text = page.read_text()
    found = []
    for m in _FENCE.finditer(text):
        if lang is not None and m.group(1) != lang:
            continue
        above = text[: m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        skip = _NOT_RUN.search(above)
        title = _TITLE.search(m.group(2))
        found.append(
            Snippet(
                m.group(1),
                text.count("\n", 0, m.start()) + 2,
                m.group(3),
                page,
                title.group(1) if title else "",
                skip.group(1) if skip else "",
            )
        )
    return found


# -- what a page says a line prints ----------------------------------------------------------------------
def python_expectations(snippet: Snippet) -> dict[int, str]:
    """{line of a print call (1 = the block's first): the output its comment shows}."""
    comments: dict[int, str] = {}
    code_lines: set[int] = set()
    prints: set[int] = set()
    tokens = list(tokenize.generate_tokens(io.StringIO(snippet.code).readline))
    for i, tok in enumerate(tokens):
        row = tok.start[0]
        if tok.type == tokenize.COMMENT:
            comments[row] = tok.string[1:].removeprefix(" ")
        elif tok.type not in (
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            code_lines.add(row)
            if tok.string == "print" and i + 1 < len(tokens) and tokens[i + 1].string == "(":
                prints.add(row)
    found = {}
    for row in sorted(prints):
        shown = [comments[row]] if row in comments else []
        below = row + 1
        while below in comments and below not in code_lines:
            shown.append(comments[below])
            below += 1
        if shown:
            found[row] = "\n".join(shown)
    return found


def command_lines(snippet: Snippet) -> list[int]:
    """The lines where a shell block's commands start: those at the left margin that are no comment (a
    command's continuation lines are indented, as the pages' are)."""
    return [row for row, text in enumerate(snippet.code.splitlines(), 1) if re.match(r"[^\s#]", text)]


def bash_expectations(snippet: Snippet) -> dict[int, str]:
    """{line where a command starts (1 = the block's first): the output the comment lines right after the
    command show}, with a command's own comment when it starts with no letter (``# 200``; ``# server
    metadata`` says what the command is)."""
    lines = snippet.code.splitlines()
    starts = command_lines(snippet)
    found: dict[int, list[str]] = {}
    for row, text in enumerate(lines, 1):
        if not text.strip() or text.startswith("#"):
            continue
        command = max(r for r in starts if r <= row)
        own = re.search(r"\s#\s(.*)$", text)
        if own and not re.match(r"[A-Za-z]", own.group(1)):
            found.setdefault(command, []).append(own.group(1))
        below = row
        while below < len(lines) and lines[below].startswith("#"):
            found.setdefault(command, []).append(lines[below][1:].removeprefix(" "))
            below += 1
    return {row: "\n".join(shown) for row, shown in found.items()}


def expected(comment: str) -> str:
    """The output a comment shows, without its notes (see the module's doc)."""
    text = re.sub(r"\((?=[^()]*[A-Za-z]{2})[^()]*\)", " ", comment)  # (targets: 0 8 9 8), (unrelated)
    text = re.split(r"\s{2,}(?=[A-Za-z])", text.strip(), maxsplit=1)[0]
    return text.strip()


#: a number (its sign is a token of its own: "chatcmpl-0d" is no number), a word, "...", any other character
_TOKEN = re.compile(r"\.\.\.|(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|\w+|\S")
_NUMBER = re.compile(r"(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")


def _same(want: str, got: str) -> bool:
    if want == got:
        return True
    if not (_NUMBER.fullmatch(want) and _NUMBER.fullmatch(got)):
        return False
    w, g = float(want), float(got)
    if w == 0 or re.fullmatch(r"\d+\.?", want):  # 0, 332, 16.: exactly
        return w == g
    shown = 0.51 * 10.0 ** int(Decimal(want).as_tuple().exponent)
    return abs(w - g) <= max(shown, 2e-5 * abs(w))


def matches(want: str, got: str) -> bool:
    """Whether output ``got`` is what ``want`` shows: token by token, whitespace aside, ``...`` any run."""
    w, g = _TOKEN.findall(want), _TOKEN.findall(got)
    # reach[j]: want[:i] matches got[:j]
    reach = [True] + [False] * len(g)
    for token in w:
        if token == "...":
            for j in range(1, len(g) + 1):
                reach[j] = reach[j] or reach[j - 1]
        else:
            reach = [False] + [reach[j] and _same(token, g[j]) for j in range(len(g))]
    return reach[-1]


# -- running a block -------------------------------------------------------------------------------------
#: run in the block's process: the code compiled at its page lines, print calls recorded by line
_RUNNER = """
import json, sys
code, first, out, name = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
printed = {}
real_print = print

def recorded(*args, sep=" ", end="\\n", file=None, flush=False):
    real_print(*args, sep=sep, end=end, file=file, flush=flush)
    frame = sys._getframe(1)  # a print of the block's own code (not of a library it calls)
    if file is None and frame.f_code.co_filename == name:
        line = frame.f_lineno - first + 1
        printed[line] = printed.get(line, "") + sep.join(map(str, args)) + end

try:
    exec(compile("\\n" * (first - 1) + code, name, "exec"), {"__name__": "__main__", "print": recorded})
finally:
    with open(out, "w") as f:
        json.dump(printed, f)
"""


@dataclass
class Run:
    """A block's run: its exit status, output, and what each print line (or command) printed."""

    returncode: int
    output: str
    printed: dict[int, str]

    def differences(self, shown: dict[int, str], first: int, page: str = "README.md") -> list[str]:
        """Each line whose output is not what the page shows (page line, shown, printed)."""
        out = []
        for line, comment in sorted(shown.items()):
            got = self.printed.get(line)
            if got is None or not matches(expected(comment), got):
                out.append(f"{page}:{first + line - 1}: shows {expected(comment)!r}, printed {got!r}")
        return out


def _env() -> dict[str, str]:
    """This interpreter's folder first on PATH: ``inferd`` and ``python`` are the venv's, as after
    ``source .venv/bin/activate``."""
    return dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")


def run_python(
    snippet: Snippet,
    cwd: Path,
    http: int,
    grpc: int,
    timeout: float,
    python: str = sys.executable,
    metrics: int = 8002,
) -> Run:
    code = snippet.with_ports(http, grpc, metrics)
    name = str(snippet.page.name)
    with tempfile.TemporaryDirectory(prefix="snippet-") as scratch:  # what it printed: never in ``cwd``
        out = Path(scratch) / f"printed-{snippet.line}.json"
        done = subprocess.run(
            [python, "-c", _RUNNER, code, str(snippet.line), str(out), name],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=_env(),
        )
        printed = {int(k): v for k, v in json.loads(out.read_text()).items()} if out.exists() else {}
    return Run(done.returncode, done.stdout + done.stderr, printed)


def run_bash(snippet: Snippet, cwd: Path, http: int, grpc: int, timeout: float, metrics: int = 8002) -> Run:
    """The block under ``bash -e``, a mark printed before each command (the n-th mark is the n-th of
    ``command_lines``), so that each command's output is known."""
    lines = snippet.with_ports(http, grpc, metrics).splitlines()
    for row in reversed(command_lines(snippet)):
        lines.insert(row - 1, "printf '\\n@@\\n'")
    done = subprocess.run(  # stderr with stdout, as a terminal shows them (inferd check reports on stderr)
        ["bash", "-e", "-c", "\n".join(lines)],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
        env=_env(),
    )
    outputs = done.stdout.split("\n@@\n")[1:]
    starts = command_lines(snippet)
    problem = "" if len(outputs) == len(starts) else f"\n{len(outputs)} commands ran, not {len(starts)}"
    return Run(done.returncode, done.stdout + problem, dict(zip(starts, outputs, strict=False)))


# -- running a page --------------------------------------------------------------------------------------
@dataclass
class Outcome:
    """What became of one block: what was done, and what went wrong."""

    snippet: Snippet
    done: str
    problems: list[str] = field(default_factory=list)


def lay_out(home: Path, models: Path) -> Path:
    """``home`` laid out as the repository is for its reader: ``examples/models`` (``models``: the served
    repository), and the repository's ``examples/python_models``, ``scripts`` and ``.tools`` (created
    when missing: scripts/get_perf_analyzer.sh installs perf_analyzer there)."""
    (ROOT / ".tools").mkdir(exist_ok=True)
    (home / "examples").mkdir(parents=True, exist_ok=True)
    links = {
        "examples/models": models,
        "examples/python_models": ROOT / "examples" / "python_models",
        "scripts": ROOT / "scripts",
        ".tools": ROOT / ".tools",
    }
    for name, target in links.items():
        if not (home / name).exists():
            (home / name).symlink_to(target.resolve())
    return home


def run_page(page: Path, home: Path, ports: Ports, serve: Serve, timeout: float) -> Iterator[Outcome]:
    """A page's blocks in order, in ``home`` (``lay_out``), against the server at ``ports`` until a serve
    block starts the page's own; stops at the first block that fails."""
    with contextlib.ExitStack() as servers:
        for snippet in snippets(page=page):
            kind = snippet.kind
            if kind == "skip":
                yield Outcome(snippet, f"not run: {snippet.skip}")
            elif kind == "":
                continue
            elif kind == "file":
                path = home / snippet.title
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(snippet.code)
                yield Outcome(snippet, f"wrote {snippet.title}")
            elif kind == "serve":
                servers.close()  # the page's earlier server stops first, as its reader stops it
                try:
                    ports = servers.enter_context(serve(snippet.serve_args(), home))
                except Exception as e:
                    yield Outcome(snippet, "serve", [f"{snippet.where}: the server did not start: {e}"])
                    return
                yield Outcome(snippet, f"serving on {ports}")
            elif kind == "bash" and any(_SERVE.match(line) for line in snippet.code.splitlines()[1:]):
                yield Outcome(
                    snippet, "not run", [f"{snippet.where}: a server's command is a block of its own"]
                )
                return
            else:
                http, grpc, metrics = ports
                if kind == "python":
                    run = run_python(snippet, home, http, grpc, timeout, metrics=metrics)
                    shown = python_expectations(snippet)
                else:
                    run = run_bash(snippet, home, http, grpc, timeout, metrics=metrics)
                    shown = bash_expectations(snippet)
                page_name = str(snippet.where.rsplit(":", 1)[0])
                problems = run.differences(shown, snippet.line, page_name)
                if run.returncode:
                    problems.insert(0, f"{snippet.where} exited with {run.returncode}:\n{run.output[-3000:]}")
                elif problems:
                    problems.append(f"output:\n{run.output[-3000:]}")
                yield Outcome(snippet, "ran", problems)
                if problems:
                    return


# -- a server of its own, for the command line -----------------------------------------------------------
@contextlib.contextmanager
def serve_here(args: list[str], cwd: Path, limit_s: float = 600.0) -> Iterator[Ports]:
    """``inferd ARGS`` on port 0, in ``cwd``: yields the ports its start-up lines name once it is
    ready; SIGTERM at the end."""
    flags = ["--http-port", "0", "--grpc-port", "0", "--metrics-port", "0"]
    with tempfile.NamedTemporaryFile() as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "inferd", *args, *flags], cwd=cwd, stdout=log, stderr=subprocess.STDOUT
        )
        try:

            def ready() -> Ports | None:
                assert proc.poll() is None, (
                    f"inferd {' '.join(args)} exited:\n{read_text(Path(log.name))[-3000:]}"
                )
                found = listening_ports(read_text(Path(log.name)))
                ports = (
                    found.get("HTTPService", 0),
                    found.get("GRPCInferenceService", 0),
                    found.get("Metrics Service", 0),
                )
                return ports if ports[0] and _ready(ports[0]) else None

            yield wait_until(ready, f"inferd {' '.join(args)} to be ready", limit_s, interval=0.1,
                             detail=lambda: read_text(Path(log.name))[-3000:])  # fmt: skip
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/health/ready", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the pages' code blocks against a running server.")
    ap.add_argument(
        "pages", nargs="*", type=Path, help="pages (default: README.md, the quickstart, the tutorials)"
    )
    ap.add_argument("--http-port", type=int, default=PAGE_PORTS["http"])
    ap.add_argument("--grpc-port", type=int, default=PAGE_PORTS["grpc"])
    ap.add_argument("--metrics-port", type=int, default=PAGE_PORTS["metrics"])
    ap.add_argument("--models", type=Path, default=ROOT / "examples" / "models", help="the served repository")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a block may take")
    a = ap.parse_args(argv)
    ports = (a.http_port, a.grpc_port, a.metrics_port)
    failed = 0
    for page in [p.resolve() for p in a.pages] or PAGES:
        with tempfile.TemporaryDirectory(prefix="page-") as home:
            for outcome in run_page(page, lay_out(Path(home), a.models), ports, serve_here, a.timeout):
                state = "FAILED" if outcome.problems else outcome.done
                print(f"{outcome.snippet.where}: {state}", flush=True)
                for p in outcome.problems:
                    print(f"  {p}", flush=True)
                failed += bool(outcome.problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
