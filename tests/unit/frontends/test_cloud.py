"""The cloud front ends' start (frontends/cloud.py, vertex.py, sagemaker.py, sagemaker_mme.py): what the
environment decides, the reference's port rules and texts, the Vertex AI routes and default model, and
which folders a multi-model load may read."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest

from inferd.errors import InvalidArgumentError
from inferd.frontends.cloud import env_defaults, port_conflict, safe_port_range
from inferd.frontends.sagemaker import SageMakerSettings
from inferd.frontends.sagemaker_mme import check_target, check_url, model_folder
from inferd.frontends.vertex import VertexRoutes, _route, default_model
from inferd.options import ServerOptions


def test_aip_mode_prediction_turns_vertex_on_and_http_and_grpc_off() -> None:
    assert env_defaults({"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "9090"}) == {
        "allow_vertex_ai": True,
        "allow_http": False,
        "allow_grpc": False,
        "vertex_ai_port": 9090,
    }
    assert env_defaults({}) == {"vertex_ai_port": 8080}
    assert env_defaults({"AIP_MODE": "TRAINING"}) == {"vertex_ai_port": 8080}
    with pytest.raises(ValueError, match=r"Invalid option value\. Got x"):
        env_defaults({"AIP_HTTP_PORT": "x"})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "abc",
            "Cannot parse pair option due to incorrect number of inputs.--<pair option> argument requires format "
            "<first>-<second>. Found: abc",
        ),
        ("5-", "Invalid option value. Got "),
        ("x-5", "Invalid option value. Got x"),
        ("1-2-3", "Cannot parse pair option due to incorrect number of inputs."),
    ],
)
def test_safe_port_range_refusals(text: str, message: str) -> None:
    with pytest.raises(ValueError) as e:
        safe_port_range(text)
    assert str(e.value).startswith(message)
    assert safe_port_range("8000-9000") == (8000, 9000)


def options(**kw: object) -> ServerOptions:
    return dataclasses.replace(ServerOptions(model_repository=[Path("/m")]), **kw)  # type: ignore[arg-type]


def test_port_conflicts_as_the_reference_says_them() -> None:
    assert port_conflict(options()) is None
    assert port_conflict(options(allow_sagemaker=True)) is None  # 8080
    assert port_conflict(options(allow_sagemaker=True, sagemaker_port=8000)) == (
        "The server cannot listen to HTTP requests and SageMaker requests at the same address and port 0.0.0.0:8000"
    )
    assert port_conflict(options(allow_sagemaker=True, allow_vertex_ai=True)) == (
        "The server cannot listen to SageMaker requests and Vertex AI requests at the same address and port "
        "0.0.0.0:8080"
    )
    assert port_conflict(options(allow_sagemaker=True, sagemaker_safe_port_range="8000-8001")) == (
        "The server cannot listen to metrics requests at port 8002, allowed port range is [8000, 8001]"
    )
    assert port_conflict(options(allow_sagemaker=True, sagemaker_safe_port_range="8000-8002")) is None
    assert port_conflict(options(http_port=0, grpc_port=0)) is None  # any free port: no conflict
    assert port_conflict(options(http_address="127.0.0.1", allow_vertex_ai=True, vertex_ai_port=8000)) is None


def test_vertex_routes_and_the_default_model(make_core) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidArgumentError, match="API_PREDICT_ROUTE is not defined for Vertex AI endpoint"):
        VertexRoutes.from_env({"AIP_HEALTH_ROUTE": "/h"})
    with pytest.raises(InvalidArgumentError, match="AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint"):
        VertexRoutes.from_env({"AIP_PREDICT_ROUTE": "/p"})
    assert VertexRoutes.from_env({"AIP_PREDICT_ROUTE": "/p", "AIP_HEALTH_ROUTE": "/h"}) == VertexRoutes(
        "/p", "/h"
    )
    assert _route("/v1/e/1:predict").fullmatch("/v1/e/1:predict")
    assert _route("/a(").fullmatch("/a(")  # no regular expression: read literally
    one, two = make_core(), make_core()
    one.models = {"identity_fp32": one.models["identity_fp32"]}
    assert default_model(one, "") == "identity_fp32"
    with pytest.raises(
        InvalidArgumentError, match="Expect the model repository contains only a single model"
    ):
        default_model(two, "")
    assert default_model(two, "repeat") == "repeat"
    with pytest.raises(InvalidArgumentError, match="Expect the default model 'nope' is loaded"):
        default_model(two, "nope")


def test_sagemaker_settings_from_the_environment() -> None:
    s = SageMakerSettings({})
    assert (s.ping_mode, s.default_model, s.inference_type) == (
        "ready",
        "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME",
        "infer",
    )
    with pytest.raises(InvalidArgumentError, match="Invalid SAGEMAKER_TRITON_INFERENCE_TYPE 'x'"):
        SageMakerSettings({"SAGEMAKER_TRITON_INFERENCE_TYPE": "x"})


@pytest.mark.parametrize(
    "url",
    [
        "/elsewhere/h/model",
        "{root}/h",
        "{root}/h/other",
        "{root}/h/model/a/b",
        "{root}/../h/model",
        "{root}/h/model/..",
        "{root}/./h/model",
        "{root}//h/model",
        "{root}/h-1/model",
        "{root}/../root/h/model",
        "",
    ],
)
def test_a_url_outside_the_pattern_is_refused(url: str, tmp_path: Path) -> None:
    root = tmp_path / "root"
    with pytest.raises(InvalidArgumentError, match="a multi-model load reads only folders under"):
        check_url(url.replace("{root}", str(root)), root)


def test_a_url_of_the_pattern_is_taken_and_links_are_followed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    (root / "h.1" / "model" / "sub").mkdir(parents=True)
    assert check_url(f"{root}/h.1/model", root) == root / "h.1" / "model"
    assert check_url(f"{root}/h.1/model/sub", root) == root / "h.1" / "model" / "sub"
    (tmp_path / "out" / "model").mkdir(parents=True)
    os.symlink(tmp_path / "out", root / "hl")
    with pytest.raises(InvalidArgumentError):
        check_url(f"{root}/hl/model", root)


@pytest.mark.parametrize("name", ["", "a/b", "..", ".", "x\\y", "nl\n"])
def test_a_target_name_with_path_characters_is_refused(name: str) -> None:
    with pytest.raises(InvalidArgumentError):
        check_target(name)
    assert check_target("model-1.tar.gz") == "model-1.tar.gz"


def test_which_folder_an_archive_serves(tmp_path: Path) -> None:
    top = tmp_path / "a" / "model"
    top.mkdir(parents=True)
    (top / "config.pbtxt").write_text('backend: "python"')
    assert model_folder(top) == (tmp_path / "a", "model")
    one = tmp_path / "b" / "model"
    (one / "m").mkdir(parents=True)
    assert model_folder(one) == (one, "m")
    ens = tmp_path / "c" / "model"
    for sub in ("ens", "step1", "step2"):
        (ens / sub).mkdir(parents=True)
        (ens / sub / "config.pbtxt").write_text(
            'platform:  "ensemble"' if sub == "ens" else 'backend: "python"'
        )
    assert model_folder(ens) == (ens, "ens")
    (ens / "ens" / "config.pbtxt").write_text('backend: "python"')
    with pytest.raises(InvalidArgumentError, match=r"holds 3 models .* and none is an ensemble"):
        model_folder(ens)
    with pytest.raises(InvalidArgumentError, match="repository not found"):
        model_folder(tmp_path / "missing")
