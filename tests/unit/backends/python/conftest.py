"""Each test starts with no instance loaded as far as pb_utils knows (threads a model starts use the
instance loaded last: one test's instances must not answer the next test's calls)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from inferd.backends.python import pb_utils


@pytest.fixture(autouse=True)
def _no_instance_left() -> Iterator[None]:
    yield
    pb_utils._fallback.clear()
    pb_utils._set_thread_hooks(pb_utils._default_hooks)
