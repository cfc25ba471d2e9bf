"""README.md's code blocks run as a reader runs them, and what they print held to what the README shows.

With ``make run`` serving (HTTP 8000, gRPC 8001), from the repository's root::

    .venv/bin/python tests/readme_snippets.py            # every ```python block of README.md, verbatim
    .venv/bin/python tests/readme_snippets.py --http-port 9000 --grpc-port 9001   # another server's ports

Each block runs in a process of its own (``python -c``, with the folder given as its working directory,
where ``examples/models`` is the served repository: the embedded-server snippet opens that path), as
written except for the ports when others are given (``localhost:8000`` and ``localhost:8001`` only).
What a ``print`` line writes is compared with the output the README shows in its comment: on the same
line, or in the comment lines right below it. How a comment is read (``expected``): notes in parentheses
(``(targets: 0 8 9 8)``) and after two spaces or a comma (``  shape (3,): ...``, ``, each of unit
length``) are not output; ``...`` stands for any output; a number matches to the digits shown (0.7553 is
0.75533 rounded) or within 2e-5 of its value, an integer or a ``1.`` exactly.

tests/e2e/test_e2e_readme_snippets.py runs them against a server of its own, with the ```bash blocks
that only call curl (their output comments: the comment lines right after a command, and a command's
own comment when it starts with no letter, e.g. ``# 200``).
"""

from __future__ import annotations

import argparse
import io
import json
import re
import subprocess
import sys
import tempfile
import tokenize
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_PORTS = {"http": 8000, "grpc": 8001}


@dataclass(frozen=True)
class Snippet:
    """A fenced code block of README.md: its language, the README line of its first line, its text."""

    lang: str
    line: int
    code: str

    @property
    def where(self) -> str:
        return f"README.md:{self.line}"

    def with_ports(self, http: int, grpc: int) -> str:
        """The code with another server's ports in place of README's (nothing else changes)."""
        code = self.code.replace(f"localhost:{README_PORTS['http']}", f"localhost:{http}")
        return code.replace(f"localhost:{README_PORTS['grpc']}", f"localhost:{grpc}")


def snippets(lang: str, readme: Path = README) -> list[Snippet]:
    """The blocks of ``lang`` that start at the left margin (indented ones belong to a list item's text)."""
    text = readme.read_text()
    found = []
    for m in re.finditer(rf"^```{lang}\n(.*?)^```$", text, re.DOTALL | re.MULTILINE):
        found.append(Snippet(lang, text.count("\n", 0, m.start()) + 2, m.group(1)))
    return found


# -- what the README says a line prints ------------------------------------------------------------------
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
    command's continuation lines are indented, as README's are)."""
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
    text = re.split(r"\s{2,}(?=[A-Za-z])|,\s+(?=[a-z])", text.strip(), maxsplit=1)[0]
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


# -- running a Python block ------------------------------------------------------------------------------
#: run in the snippet's process: the code compiled at its README lines, print calls recorded by line
_RUNNER = """
import json, sys
code, first, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
printed = {}
real_print = print

def recorded(*args, sep=" ", end="\\n", file=None, flush=False):
    real_print(*args, sep=sep, end=end, file=file, flush=flush)
    frame = sys._getframe(1)  # a print of the snippet's own code (not of a library it calls)
    if file is None and frame.f_code.co_filename == "README.md":
        line = frame.f_lineno - first + 1
        printed[line] = printed.get(line, "") + sep.join(map(str, args)) + end

try:
    exec(compile("\\n" * (first - 1) + code, "README.md", "exec"), {"__name__": "__main__", "print": recorded})
finally:
    with open(out, "w") as f:
        json.dump(printed, f)
"""


@dataclass
class Run:
    """A block's run: its exit status, output, and what each print line printed."""

    returncode: int
    output: str
    printed: dict[int, str]

    def differences(self, shown: dict[int, str], first: int) -> list[str]:
        """Each line whose output is not what the README shows (README line, shown, printed)."""
        out = []
        for line, comment in sorted(shown.items()):
            got = self.printed.get(line)
            if got is None or not matches(expected(comment), got):
                out.append(f"README.md:{first + line - 1}: shows {expected(comment)!r}, printed {got!r}")
        return out


def run_python(
    snippet: Snippet, cwd: Path, http: int, grpc: int, timeout: float, python: str = sys.executable
) -> Run:
    code = snippet.with_ports(http, grpc)
    with tempfile.TemporaryDirectory(prefix="readme-") as scratch:  # what it printed: never in ``cwd``
        out = Path(scratch) / f"readme-{snippet.line}.json"
        done = subprocess.run(
            [python, "-c", _RUNNER, code, str(snippet.line), str(out)],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        printed = {int(k): v for k, v in json.loads(out.read_text()).items()} if out.exists() else {}
    return Run(done.returncode, done.stdout + done.stderr, printed)


def run_bash(snippet: Snippet, cwd: Path, http: int, grpc: int, timeout: float) -> Run:
    """The block under ``bash -e``, with a DEBUG trap that marks where each command's output starts (the
    n-th mark is the n-th of ``command_lines``)."""
    done = subprocess.run(
        ["bash", "-e", "-c", "trap 'printf \"\\n@@\\n\"' DEBUG\n" + snippet.with_ports(http, grpc)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    outputs = done.stdout.split("\n@@\n")[1:]
    starts = command_lines(snippet)
    problem = "" if len(outputs) == len(starts) else f"\n{len(outputs)} commands ran, not {len(starts)}"
    return Run(done.returncode, done.stdout + done.stderr + problem, dict(zip(starts, outputs, strict=False)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run README.md's Python snippets against a running server.")
    ap.add_argument("--http-port", type=int, default=README_PORTS["http"])
    ap.add_argument("--grpc-port", type=int, default=README_PORTS["grpc"])
    ap.add_argument(
        "--cwd", type=Path, default=ROOT, help="where examples/models is (default: the repository)"
    )
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a snippet may take")
    a = ap.parse_args(argv)
    failed = 0
    for snippet in snippets("python"):
        run = run_python(snippet, a.cwd, a.http_port, a.grpc_port, a.timeout)
        problems = run.differences(python_expectations(snippet), snippet.line)
        if run.returncode:
            problems.insert(0, f"exited with {run.returncode}:\n{run.output[-2000:]}")
        print(f"{snippet.where}: {'ok' if not problems else 'FAILED'}", flush=True)
        for p in problems:
            print(f"  {p}")
        failed += bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
