"""What a model's exception tells a client: the model's message and frames, none of the server's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from inferd.backends.python import pb_utils
from inferd.backends.python.loader import format_exception


def test_the_servers_own_frames_stay_in_the_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    model = tmp_path / "model.py"
    model.write_text(
        "import triton_python_backend_utils as pb_utils\n"
        "def execute():\n"
        "    return pb_utils.get_input_tensor_by_name(object(), 'X')\n"
    )
    namespace: dict[str, object] = {}
    exec(compile(model.read_text(), str(model), "exec"), namespace)  # the model's own frame
    assert pb_utils is sys.modules["triton_python_backend_utils"]
    with pytest.raises(Exception) as info:
        namespace["execute"]()  # type: ignore[operator]
    caplog.set_level("DEBUG", logger="inferd.python")
    text = format_exception(info.value)
    assert f"{model}(3): execute" in text  # the model's frame, as the reference shows it
    # no frame of the server's package (src/inferd/...); the checkout's own folder may well be
    # called inferd, as a clone's is, so the test's own frame may hold "/inferd/"
    package = str(Path(pb_utils.__file__).resolve().parents[2]) + os.sep
    assert "pb_utils" not in text and package not in text.split("At:")[1]
    assert "pb_utils" in caplog.text  # the whole traceback is in the log
