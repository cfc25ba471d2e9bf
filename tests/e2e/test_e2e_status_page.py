"""The live status page in a real browser (Debian's headless Chromium): the page loads from the
package, draws every model from /v2/status, and a request the test sends shows up in it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import InferdProcess

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


class Rows(HTMLParser):
    """The cells of each ``<tr data-model=...>`` of the rendered page."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, list[str]] = {}
        self._model: str | None = None
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and a.get("data-model"):
            self._model = a["data-model"]
            self.rows[self._model or ""] = []
        elif tag == "td" and self._model is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "td" and self._model is not None and self._cell is not None:
            self.rows[self._model].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr":
            self._model = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _browse(url: str, out: Path) -> tuple[dict[str, list[str]], str]:
    """The page at ``url`` after its scripts ran (rows by model), and a screenshot in ``out``."""
    assert CHROMIUM is not None
    flags = [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=4000"]
    dom = subprocess.run(
        [*flags, "--dump-dom", url], capture_output=True, text=True, timeout=120, check=True
    ).stdout
    subprocess.run(
        [*flags, f"--screenshot={out}", "--window-size=1400,600", url],
        capture_output=True,
        timeout=120,
        check=True,
    )
    parser = Rows()
    parser.feed(dom)
    return parser.rows, dom


@pytest.mark.skipif(
    CHROMIUM is None, reason="no Chromium installed (make test installs Debian's where it can)"
)
def test_the_status_page_shows_a_request_the_test_sent(server: InferdProcess, tmp_path: Path) -> None:
    doc = {"inputs": [{"name": "INPUT0", "shape": [1], "datatype": "BYTES", "data": ["x"]}]}
    before = server.request("GET", "/v2/status").json()
    served = {m["name"]: m.get("served", 0) for m in before["models"]}["identity_bytes"]
    for _ in range(3):
        assert server.infer("identity_bytes", doc).status == 200
    sent = time.monotonic()
    rows, dom = _browse(f"{server.base_url}/", tmp_path / "status.png")
    # the rate covers the last 10 s: on a loaded machine Chromium may draw the page after that
    within_window = time.monotonic() - sent < 9
    assert "identity_bytes" in rows and "add_sub" in rows, dom[:2000]
    cells = rows["identity_bytes"]
    assert cells[:3] == ["identity_bytes", "1", "READY"]
    assert int(cells[4]) >= served + 3  # served
    assert cells[6].endswith("req/s")
    if within_window:  # the three are within the rate's 10 s
        assert float(cells[6].split()[0]) > 0
    assert cells[7].endswith("ms")  # p50 latency
    assert (tmp_path / "status.png").stat().st_size > 1000
    # the same page on the metrics port
    metrics_rows, _ = _browse(f"http://127.0.0.1:{server.metrics_port}/", tmp_path / "metrics-port.png")
    assert set(metrics_rows) == set(rows)


def test_status_data_and_methods(server: InferdProcess) -> None:
    r = server.request("GET", "/v2/status")
    assert r.status == 200 and r.headers["content-type"] == "application/json"
    doc = json.loads(r.body)
    assert doc["server"]["live"] and {m["name"] for m in doc["models"]} >= {"add_sub", "identity_fp32"}
    page = server.request("GET", "/")
    assert page.status == 200 and page.headers["content-type"].startswith("text/html")
    assert b"/v2/status" in page.body and b"://" not in page.body  # nothing from outside the server
    assert server.request("POST", "/v2/status").status == 405
    assert (
        server.request("POST", "/").status == 404
    )  # only GET / is the page, as the reference's 404 otherwise


def test_the_status_page_can_be_turned_off(start_server: object) -> None:
    srv = start_server("--allow-status-page=false")  # type: ignore[operator]
    for path in ("/", "/v2/status"):  # as the reference answers an unknown path
        r = srv.request("GET", path)
        assert (r.status, r.content_type, r.body) == (404, "text/plain", b'{"error":"Not Found"}')
