"""Issue 42's tree-model cases: hostile model files a client uploads through a repository load with
file overrides (``POST /v2/repository/models/<name>/load`` with ``config`` and ``file:1/<file>``), each
made from a model the case trains and then corrupts (``tests/fil_models.py``, shared with the e2e
tests), against a server of its own that serves another tree model:

- ``fil_split_feature``: an XGBoost JSON whose first split reads feature 1,000,000 of 30;
- ``fil_checkpoint_field``: a Treelite checkpoint whose first leaf's ``leaf_vector_end`` is 2^40;
- ``fil_num_leaves``: a 4 KB LightGBM text model whose first tree declares 1,000,000,000 leaves;
- ``fil_tree_cycle``: a LightGBM text model whose first tree's node 1 has the root as its child.

Each case sends the load, then (if it loaded) one-row inferences to the uploaded model, and reads
the load's answer, the server's exit code if it died, its RSS over the case's idle figure (sampled
every 50 ms; a server past ``fil_memory_cap`` or a load past ``fil_hold_s`` is killed: one without
the checks must not take the machine), and whether the other model still answers. Before issue 42
(``INFERD_SRC`` at the commit before it) the first two ended the server, the last two held a load
that never finished while its memory grew; the figures are in the cases' descriptions.

``CASES`` maps a name to (what, expected, which limit the RSS goal uses, function).

    python -m reliability.attacks_fil [CASE ...]        (INFERD_SRC=<tree>/src: attack another tree)
"""

from __future__ import annotations

import argparse
import base64
import http.client
import json
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from reliability.common import ROOT, MiB, Server

sys.path.insert(0, str(ROOT / "tests"))  # fil_models.py: the trained models and their corruptions
import fil_models as fm

FIL_DEFAULTS: dict[str, Any] = {
    "fil_hold_s": 60.0,  # a load unanswered this long is a hung load: the server is killed
    "fil_memory_cap": 2 << 30,  # a server past this RSS is killed (a load without the checks grows on)
    "fil_rows": 40,  # one-row inferences sent to an uploaded model that loaded
}
SIGNALS = {signal.SIGSEGV: "SIGSEGV", signal.SIGABRT: "SIGABRT", signal.SIGKILL: "SIGKILL"}


def _cfg(cfg: Any, name: str) -> Any:
    return getattr(cfg, name, FIL_DEFAULTS[name])


def _repo(work: Path) -> Path:
    """A repository with ``other``: an XGBoost classifier (30 features) that must keep serving."""
    repo = Path(tempfile.mkdtemp(prefix="fil-", dir=work))
    booster = fm.xgboost("cancer", "binary:logistic")
    fm.write(
        repo, "other", booster, "xgboost_json", fm.config("other", "xgboost_json", 30, 1, output_class=False)
    )
    return repo


def _infer_body(rows: list[list[float]]) -> bytes:
    return json.dumps(
        {
            "inputs": [
                {"name": "input__0", "shape": [len(rows), len(rows[0])], "datatype": "FP32", "data": rows}
            ]
        }
    ).encode()


def _exit_text(server: Server) -> str:
    assert server.proc is not None
    code = server.proc.poll()
    if code is None:
        return "alive"
    if code < 0:
        name = SIGNALS.get(signal.Signals(-code), f"signal {-code}")
        return f"DIED: {name} (exit {128 - code} in a shell)"
    return f"DIED: exit {code}"


def _upload(
    server: Server,
    cfg: Any,
    name: str,
    model_type: str,
    data: bytes,
    features: int,
    width: int,
    rows: list[list[float]],
) -> tuple[str, bool, str]:
    """The case: ``data`` uploaded as ``name``'s model file, then rows sent to it if it loaded."""
    work = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=server.log_path.parent))  # the run's folder
    victim = Server(
        _repo(work), work / f"{name}.log", ["--model-control-mode=explicit", "--load-model=other"]
    ).start()
    hold, cap = float(_cfg(cfg, "fil_hold_s")), int(_cfg(cfg, "fil_memory_cap"))
    other = _infer_body(rows=[[0.5] * 30])
    try:
        assert victim.get("/v2/models/other/ready")[0] == 200
        victim.post("/v2/models/other/infer", other)
        # the other model's XGBoost engine loads in a thread of its own (about 90 MiB): in before idle is
        # read, or an upload refused in a worker process (seconds) would count it
        deadline = time.monotonic() + 120
        while "model 'other': XGBoost's engine loaded" not in victim.log() and time.monotonic() < deadline:
            time.sleep(0.05)
        idle = peak = victim.rss()
        body = json.dumps(
            {
                "parameters": {
                    "config": fm.config_json(name, model_type, features, width),
                    f"file:1/{fm.FILES[model_type]}": base64.b64encode(data).decode(),
                }
            }
        ).encode()
        answer: list[tuple[int, bytes] | str] = []

        def load() -> None:
            conn = http.client.HTTPConnection("127.0.0.1", victim.http_port, timeout=hold + 30)
            try:
                conn.request("POST", f"/v2/repository/models/{name}/load", body=body)
                r = conn.getresponse()
                answer.append((r.status, r.read()))
            except (OSError, http.client.HTTPException) as e:
                answer.append(type(e).__name__)
            finally:
                conn.close()

        t0 = time.monotonic()
        threading.Thread(target=load, daemon=True).start()
        stopped = ""
        while not answer:
            peak = max(peak, victim.rss())
            if not victim.alive():
                break
            if peak > cap or time.monotonic() - t0 > hold:
                stopped = (
                    f"killed by the case: RSS {peak / MiB:,.0f} MiB past the cap"
                    if peak > cap
                    else f"killed by the case: the load unanswered after {hold:g} s (RSS {peak / MiB:,.0f} MiB)"
                )
                victim.kill()
                break
            time.sleep(0.05)
        secs = time.monotonic() - t0
        got = answer[0] if answer else None
        message = ""
        if isinstance(got, tuple):
            status, raw = got
            try:
                message = str(json.loads(raw)["error"])
            except (ValueError, KeyError, TypeError):
                message = raw[:200].decode(errors="replace")
            message = re.sub(r"/\S*/inferd-override-[^/]+/", "<upload>/", message).strip().rstrip(";")
            load_text = f"load {status} in {secs:.2f} s"
        else:
            status = 0
            load_text = f"load unanswered ({got or stopped}) after {secs:.1f} s"
        served = failed = 0
        if status == 200:
            for row in rows[: int(_cfg(cfg, "fil_rows"))]:
                try:
                    code, _ = victim.post(f"/v2/models/{name}/infer", _infer_body([row]))
                except OSError:
                    failed += 1
                    break
                served += code == 200
                failed += code != 200
            time.sleep(0.5)  # a server ended by the last request: let the kernel report it
        alive = victim.alive()
        after = victim.rss() if alive else 0
        peak = max(peak, after)
        other_status = victim.post("/v2/models/other/infer", other)[0] if alive else "-"
        parts = [load_text]
        if status == 200:
            parts.append(f"then {served} one-row inference(s) answered, {failed} not")
        parts.append(f"server {stopped or _exit_text(victim)}")
        parts.append(f"RSS peak +{(peak - idle) / MiB:,.1f} MiB over idle")
        parts.append(f"other model: {other_status}")
        if status != 200 and message:
            # the reason past Triton's prefix: what the table has room for
            parts.append("why: " + message.split("failed to load ", 1)[-1][:300])
        ok = status == 400 and alive and other_status == 200 and peak - idle < 64 * MiB
        return "; ".join(parts), ok, f"a {len(data):,}-byte {fm.FILES[model_type]}"
    finally:
        if victim.alive():
            victim.kill()


def _rows(data: str, n: int = 40) -> list[list[float]]:
    x, _ = fm.dataset(data)
    return [[float(v) for v in r] for r in x[:n]]


def split_feature(server: Server, cfg: Any) -> tuple[str, bool, str]:
    data = fm.bad_split_feature(fm.xgboost("cancer", "binary:logistic", trees=3))
    return _upload(server, cfg, "fil_split_feature", "xgboost_json", data, 30, 1, _rows("cancer"))


def checkpoint_field(server: Server, cfg: Any) -> tuple[str, bool, str]:
    data = fm.bad_checkpoint_field(fm.sklearn_forest("iris", trees=3))
    x, _ = fm.dataset("iris")
    rows = [[float(v) for v in r] for r in x[::3]]  # every class: some rows reach the leaf
    return _upload(server, cfg, "fil_checkpoint_field", "treelite_checkpoint", data, 4, 3, rows)


def num_leaves(server: Server, cfg: Any) -> tuple[str, bool, str]:
    data = fm.huge_num_leaves(fm.lightgbm("diabetes", "regression", trees=2, num_leaves=4))
    return _upload(server, cfg, "fil_num_leaves", "lightgbm", data, 10, 1, _rows("diabetes"))


def tree_cycle(server: Server, cfg: Any) -> tuple[str, bool, str]:
    data = fm.tree_cycle(fm.lightgbm("diabetes", "regression", trees=2, num_leaves=4))
    return _upload(server, cfg, "fil_tree_cycle", "lightgbm", data, 10, 1, _rows("diabetes"))


EXPECTED = "400 naming the file and what is wrong, at once; the server alive, RSS flat, the other model 200"
CASES: dict[str, tuple[str, str, str, Callable[[Server, Any], tuple[str, bool, str]]]] = {
    # name: (what, expected, which limit the RSS goal uses, function)
    "fil_split_feature": (
        "an uploaded XGBoost JSON whose first split reads feature 1,000,000 of 30 (before issue 42: loaded, 200; "
        "its first one-row inference ended the server: SIGSEGV, exit 139)",
        EXPECTED,
        "body",
        split_feature,
    ),
    "fil_checkpoint_field": (
        "an uploaded Treelite checkpoint whose first leaf's leaf_vector_end is 2^40 (before issue 42: loaded, "
        "answered 19 one-row inferences; the 20th, the first to reach that leaf, ended the server: SIGSEGV, "
        "exit 139; the probe's field ended it with SIGABRT, 134)",
        EXPECTED,
        "body",
        checkpoint_field,
    ),
    "fil_num_leaves": (
        "an uploaded 4 KB LightGBM model whose first tree declares 1,000,000,000 leaves (before issue 42: the "
        "load never answered; the server grew by 2 GiB in 12-23 s, when the case killed it at its cap; 12.8 GB "
        "after 9 minutes in the probe)",
        EXPECTED,
        "body",
        num_leaves,
    ),
    "fil_tree_cycle": (
        "an uploaded LightGBM model whose first tree's node 1 has the root as its child (before issue 42: the "
        "load never answered; the server grew by 2 GiB in 5-8 s, when the case killed it at its cap)",
        EXPECTED,
        "body",
        tree_cycle,
    ),
}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="issue 42's hostile tree-model uploads, alone")
    p.add_argument("cases", nargs="*", default=list(CASES), help=f"cases (default all: {', '.join(CASES)})")
    p.add_argument("--json", type=Path, help="write the results here as JSON")
    args = p.parse_args(argv)
    ok = True
    results = []
    work = Path(tempfile.mkdtemp(prefix="inferd-fil-attacks-"))  # the victims' logs and repositories
    for name in args.cases:
        what, expected, _limit, func = CASES[name]
        got, good, note = func(Server(ROOT, work / "unused.log"), None)
        ok &= good
        results.append(
            {"name": name, "what": what, "expected": expected, "got": got, "ok": good, "notes": note}
        )
        print(
            f"{name}: {'ok' if good else 'MISS'}\n  what: {what}\n  expected: {expected}\n  got: {got}\n  ({note})"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    print(f"(logs in {work})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
