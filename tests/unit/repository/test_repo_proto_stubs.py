"""typings/: the committed type stubs of tritonclient's protobuf modules match the installed ones."""

from __future__ import annotations

from types import ModuleType

import pytest

from inferd.frontends.grpc._pb import pb
from inferd.repository._proto import pb2
from repo_paths import ROOT, load_script

TYPINGS = ROOT / "typings"


def test_committed_stubs_are_what_the_script_writes() -> None:
    """From the tritonclient they were written from (another one skips, naming both: after an
    upgrade, run ``make proto-stubs``), the script writes the committed stubs byte for byte."""
    pytest.importorskip("grpc_tools", reason="grpcio-tools (the dev extra) writes the stubs")
    script = load_script(ROOT / "scripts" / "proto_stubs.py", "proto_stubs")
    first = (TYPINGS / "tritonclient" / "grpc" / "model_config_pb2.pyi").read_text().splitlines()[0]
    if f" tritonclient {script.version()}'s " not in first:
        pytest.skip(
            f"typings/ was written from another tritonclient ({first}), {script.version()} is installed"
        )
    written = script.generate()
    assert set(written) == {
        "tritonclient/__init__.pyi",
        "tritonclient/grpc/__init__.pyi",
        "tritonclient/grpc/model_config_pb2.pyi",
        "tritonclient/grpc/service_pb2.pyi",
    }
    for rel, text in written.items():
        assert (TYPINGS / rel).read_text() == text, f"typings/{rel} is stale: run make proto-stubs"


@pytest.mark.parametrize(("module", "stub"), [(pb2, "model_config_pb2"), (pb, "service_pb2")])
def test_every_message_of_the_module_is_in_its_stub(module: ModuleType, stub: str) -> None:
    text = (TYPINGS / "tritonclient" / "grpc" / f"{stub}.pyi").read_text()
    names = list(module.DESCRIPTOR.message_types_by_name)
    assert len(names) > 20
    for name in names:
        assert f"\nclass {name}(_message.Message):" in text, name
