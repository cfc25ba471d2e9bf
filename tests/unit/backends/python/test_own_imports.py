"""A model's own modules (own_imports.py): two models with a ``utils`` package of the same name beside
their ``model.py`` each run theirs, however and wherever they import it; the standard library still
comes first; an unloaded model's modules go, and a new load imports them afresh."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pymodels import execute, instance, request, write_model

from inferd.backends.python import own_imports
from inferd.backends.python.backend import PythonInstance

MODEL = """
import importlib
import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils
import utils
from utils import WHO
from utils.sub import sub_who


class TritonPythonModel:
    def execute(self, requests):
        import utils as again
        from utils import sub

        box = {}

        def lazily():  # a thread the model starts: its imports are the model's
            box["thread"] = importlib.import_module("utils").WHO

        t = threading.Thread(target=lazily)
        t.start()
        t.join()
        seen = [utils.WHO, WHO, sub_who(), again.WHO, sub.sub_who(),
                importlib.import_module("utils.sub").sub_who(), box["thread"], utils.relative()]
        msg = pb_utils.Tensor("MSG", np.array([json.dumps(seen)], dtype=np.object_))
        return [pb_utils.InferenceResponse([msg]) for _ in requests]
"""


def _with_utils(root: Path, name: str, who: str) -> Path:
    model_dir = write_model(root, name, MODEL)
    package = model_dir / "1" / "utils"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(f"""
        from .sub import sub_who
        from utils.sub import sub_who as absolute

        WHO = {who!r}

        def relative():
            return sub_who() == absolute()
        """)
    )
    (package / "sub.py").write_text(f"def sub_who():\n    return 'sub-{who}'\n")
    return model_dir


def _msg(inst: PythonInstance) -> Any:
    responses = asyncio.run(execute(inst, request()))
    assert responses is not None
    (msg,) = [t for t in responses[0].outputs if t.name == "MSG"]
    return msg.array.tolist()[0]


def _seen(inst: PythonInstance) -> Any:
    return json.loads(_msg(inst))


def test_two_models_each_run_their_own_helper_package(tmp_path: Path) -> None:
    a = instance(_with_utils(tmp_path, "own_a", "a"))
    b = instance(_with_utils(tmp_path, "own_b", "b"))
    try:
        assert _seen(a) == ["a", "a", "sub-a", "a", "sub-a", "sub-a", "a", True]
        assert _seen(b) == ["b", "b", "sub-b", "b", "sub-b", "sub-b", "b", True]
        assert _seen(a)[0] == "a"  # and the first again, after the second ran
        assert "utils" not in sys.modules  # neither took the shared name
    finally:
        a.unload()
        b.unload()


def test_a_pickled_helper_class_comes_back_as_the_models_own(tmp_path: Path) -> None:
    source = """
    import pickle
    import numpy as np
    import triton_python_backend_utils as pb_utils
    from helper import Thing

    class TritonPythonModel:
        def execute(self, requests):
            back = pickle.loads(pickle.dumps(Thing()))
            msg = pb_utils.Tensor("MSG", np.array([back.who() + "/" + str(type(back) is Thing)], dtype=np.object_))
            return [pb_utils.InferenceResponse([msg]) for _ in requests]
    """
    insts = []
    for who in ("a", "b"):
        model_dir = write_model(tmp_path, f"pickled_{who}", source)
        (model_dir / "1" / "helper.py").write_text(
            f"class Thing:\n    def who(self):\n        return {who!r}\n"
        )
        insts.append(instance(model_dir))

    try:
        assert [_msg(i) for i in insts] == ["a/True", "b/True"]
    finally:
        for i in insts:
            i.unload()


def test_the_rest_of_sys_path_comes_first(tmp_path: Path) -> None:
    """A model's ``json.py`` does not replace the standard library's (the reference appends the
    model's folders to sys.path)."""
    source = """
    import json
    import numpy as np
    import triton_python_backend_utils as pb_utils

    class TritonPythonModel:
        def execute(self, requests):
            msg = pb_utils.Tensor("MSG", np.array([json.dumps([hasattr(json, "MINE")])], dtype=np.object_))
            return [pb_utils.InferenceResponse([msg]) for _ in requests]
    """
    model_dir = write_model(tmp_path, "shadow", source)
    (model_dir / "1" / "json.py").write_text("MINE = True\n")
    inst = instance(model_dir)
    try:
        assert _seen(inst) == [False]
    finally:
        inst.unload()


def test_an_unloaded_models_helpers_go_and_a_new_load_imports_them_afresh(tmp_path: Path) -> None:
    model_dir = _with_utils(tmp_path, "reloaded", "one")
    inst = instance(model_dir)
    package = own_imports._of_module[inst.model.module].name
    assert _seen(inst)[0] == "one"
    assert f"{package}.utils" in sys.modules
    inst.unload()
    assert not [k for k in sys.modules if k == package or k.startswith(package + ".")]
    (model_dir / "1" / "utils" / "__init__.py").write_text(
        "from .sub import sub_who\nWHO = 'two'\ndef relative():\n    return True\n"
    )
    again = instance(model_dir)
    try:
        assert _seen(again)[0] == "two"
    finally:
        again.unload()


def test_a_failed_load_leaves_nothing_behind(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "broken", "import utils\nraise RuntimeError('no')\n")
    (model_dir / "1" / "utils.py").write_text("WHO = 'broken'\n")
    with pytest.raises(Exception, match="RuntimeError: no"):
        instance(model_dir)
    left = [
        m for m in list(sys.modules.values()) if str(getattr(m, "__file__", "")).startswith(str(model_dir))
    ]
    assert left == []


def test_a_missing_helper_is_named_as_the_model_names_it(tmp_path: Path) -> None:
    model_dir = write_model(tmp_path, "missing_sub", "import utils.nope\n")
    (model_dir / "1" / "utils").mkdir()
    (model_dir / "1" / "utils" / "__init__.py").write_text("")
    with pytest.raises(Exception) as info:
        instance(model_dir)
    assert "ModuleNotFoundError: No module named 'utils.nope'" in str(info.value)
