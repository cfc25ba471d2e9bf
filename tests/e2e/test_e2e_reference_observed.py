"""More of the real Triton 2.51's answers, asked of inferd: tests/fixtures/reference_observed.json.

Each row is a request and the reference's status, content type and body, recorded with
tests/fixtures/make_reference_observed.py against the reference serving the same repository
(reference models + tests/fixtures/models). After every answer a good request must still succeed.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from conftest import REPO_ROOT, InferdProcess

OBSERVED_FILE = REPO_ROOT / "tests" / "fixtures" / "reference_observed.json"
OBSERVED: list[dict[str, Any]] = json.loads(OBSERVED_FILE.read_text())

pytestmark = pytest.mark.timeout(60)


def _body(row: dict[str, Any]) -> bytes | None:
    b = row["body"]
    if b is None:
        return None
    if "json" in b:
        return json.dumps(b["json"]).encode()
    return base64.b64decode(b["b64"])


def _expected(row: dict[str, Any]) -> bytes:
    r = row["response"]
    return r["text"].encode() if "text" in r else base64.b64decode(r["b64"])


def test_observed_ids_are_unique() -> None:
    ids = [row["id"] for row in OBSERVED]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("row", OBSERVED, ids=[row["id"] for row in OBSERVED])
def test_reference_observed(server: InferdProcess, row: dict[str, Any]) -> None:
    r = server.request(row["method"], row["path"], _body(row), row["headers"])
    if row["method"] == "GET" and row["path"] == "/":
        # inferd's live status page (beyond the reference); turned off, / answers as the reference
        # does (test_e2e_status_page.py)
        assert (r.status, r.content_type) == (200, "text/html; charset=utf-8")
        return
    expected = _expected(row)
    got = (r.status, r.content_type, r.body)
    want = (row["status"], row["content_type"], expected)
    if row["path"] == "/v2/repository/index" and r.status == 200:
        # the index also lists what loaded or failed: compare the entries of the models asked about
        assert (r.status, r.content_type) == want[:2]
        want_entries = json.loads(expected)
        recorded = {e["name"] for e in want_entries}  # test models added since the recording are not compared
        got_entries = [e for e in r.json() if e["name"] in recorded]
        assert sorted(got_entries, key=lambda e: (e["name"], e.get("version", ""))) == sorted(
            want_entries, key=lambda e: (e["name"], e.get("version", ""))
        )
    elif r.content_type == "application/json" and r.status == 200 and expected.startswith(b"{"):
        assert (r.status, r.content_type) == want[:2]
        assert r.json() == json.loads(expected)
        assert r.body == expected or _only_map_order_differs(r.json(), json.loads(expected))
    else:
        assert got == want
    server.assert_serving()


_PROTO_MAPS = {"input_map", "output_map", "parameters", "metric_tags", "cc_model_filenames"}


def _key_order(doc: Any) -> Any:
    if isinstance(doc, dict):
        return [(k, None if k in _PROTO_MAPS else _key_order(v)) for k, v in doc.items()]
    if isinstance(doc, list):
        return [_key_order(v) for v in doc]
    return None


def _only_map_order_differs(got: Any, want: Any) -> bool:
    return bool(_key_order(got) == _key_order(want))
