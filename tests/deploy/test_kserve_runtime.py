"""KServe's manifests (deploy/kserve): the ServingRuntime, the ClusterServingRuntime and the example
InferenceService are valid KServe objects (KServe's API types, strict: no unknown field; the
containers also as Kubernetes' JSON schema has them), the runtime's command line is KServe's own
Triton runtime's and parses with inferd's CLI into the ports KServe expects, and an InferenceService
with ``modelFormat: triton`` resolves to inferd's runtime by KServe's selection rules, beside KServe's
kserve-tritonserver. No cluster is contacted (tests/e2e/test_e2e_triton_command_lines.py runs the
runtime's command line against a real server)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from deploy_files import KSERVE, image_command, kserve_errors, read_yaml
from inferd.cli import build_parser, options_from_args
from inferd.options import ServerOptions

RUNTIMES = ("servingruntime.yaml", "clusterservingruntime.yaml")
MANIFESTS = (*RUNTIMES, "inferenceservice.yaml")
#: KServe's ClusterServingRuntime kserve-tritonserver (config/runtimes/kserve-tritonserver.yaml): its
#: container's args and what its selection reads
KSERVE_TRITON_ARGS = [
    "tritonserver",
    "--model-store=/mnt/models",
    "--grpc-port=9000",
    "--http-port=8080",
    "--allow-grpc=true",
    "--allow-http=true",
]
KSERVE_TRITON: dict[str, Any] = {
    "kind": "ClusterServingRuntime",
    "metadata": {"name": "kserve-tritonserver"},
    "spec": {
        "supportedModelFormats": [
            {"name": "tensorrt", "version": "8", "autoSelect": True, "priority": 1},
            {"name": "tensorflow", "version": "1", "autoSelect": True, "priority": 1},
            {"name": "tensorflow", "version": "2", "autoSelect": True, "priority": 1},
            {"name": "onnx", "version": "1", "autoSelect": True, "priority": 1},
            {"name": "pytorch", "version": "1"},
            {"name": "triton", "version": "2", "autoSelect": True, "priority": 1},
        ],
        "protocolVersions": ["v2", "grpc-v2"],
        "containers": [{"name": "kserve-container", "image": "kserve-tritonserver:replace"}],
    },
}
KUBE_VERSIONS = ("1.25", "1.37")


def manifest(name: str) -> dict[str, Any]:
    doc = read_yaml(KSERVE / name)
    assert isinstance(doc, dict)
    return doc


#: changes to servingruntime.yaml the check must refuse: (where, what is set there, what it says)
BROKEN: dict[str, tuple[tuple[Any, ...], dict[str, Any], str]] = {
    "misspelt field": (
        ("spec", "supportedModelFormats", 0),
        {"autoselect": True},
        "unknown field(s) autoselect",
    ),
    "wrong type": (("spec", "supportedModelFormats", 0), {"priority": "2"}, "priority: expected int"),
    "wrong type below": (
        ("spec", "containers", 0, "securityContext"),
        {"runAsUser": "root"},
        "securityContext.runAsUser: expected int",
    ),
    "field of another kind": (("spec",), {"protocolVersion": ["v2"]}, "unknown field(s) protocolVersion"),
}


def broken(where: tuple[Any, ...], change: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(manifest("servingruntime.yaml"))
    target: Any = doc
    for key in where:
        target = target[key]
    target.update(change)
    return doc


@pytest.fixture(scope="module")
def verdicts() -> dict[str, str | None]:
    """The check's verdict on each manifest and each broken variant, in one run of it."""
    docs = {name: manifest(name) for name in MANIFESTS}
    docs |= {case: broken(where, change) for case, (where, change, _) in BROKEN.items()}
    nameless = copy.deepcopy(manifest("servingruntime.yaml"))
    del nameless["spec"]["containers"][0]["name"]
    docs["container without its name"] = nameless
    return dict(zip(docs, kserve_errors(list(docs.values())), strict=True))


@pytest.mark.parametrize("name", MANIFESTS)
def test_manifests_are_valid_kserve_objects(name: str, verdicts: dict[str, str | None]) -> None:
    assert verdicts[name] is None
    # what the CRD asks beyond the SDK's types: every model format named, priorities from 1
    for fmt in manifest(name)["spec"].get("supportedModelFormats", []):
        assert fmt.get("name") and fmt.get("priority", 1) >= 1


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_the_schema_check_catches_a_wrong_field(case: str, verdicts: dict[str, str | None]) -> None:
    said = verdicts[case]
    assert said is not None and BROKEN[case][2] in said, said


def test_the_schema_check_catches_a_missing_required_field(verdicts: dict[str, str | None]) -> None:
    said = verdicts["container without its name"]
    assert said is not None and said.startswith("ServingRuntime.spec.containers[0]:") and "name" in said


@pytest.mark.parametrize("name", RUNTIMES)
def test_runtime_containers_are_valid_kubernetes_containers(name: str) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (make install)")
    spec = manifest(name)["spec"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x"},
        "spec": {"containers": spec["containers"]},
    }
    for version in KUBE_VERSIONS:
        kv.validate(pod, version, strict=True)


def runtime_options(name: str) -> ServerOptions:
    """The runtime container's command line (the image's ENTRYPOINT, then its args) as inferd parses it."""
    argv = image_command(manifest(name)["spec"]["containers"][0])
    assert argv[0] == "inferd"
    return options_from_args(build_parser().parse_args(argv[1:]))


@pytest.mark.parametrize("name", RUNTIMES)
def test_the_runtime_runs_kserves_triton_args_on_inferds_image(name: str) -> None:
    container = manifest(name)["spec"]["containers"][0]
    assert container["name"] == "kserve-container"  # the name KServe looks for
    assert container["args"] == KSERVE_TRITON_ARGS
    options = runtime_options(name)
    # KServe serves HTTP on 8080 and gRPC (grpc-v2) on 9000 of kserve-container; the storage
    # initializer's folder is the repository
    assert (options.http_port, options.grpc_port) == (8080, 9000)
    assert [str(p) for p in options.model_repository] == ["/mnt/models"]
    assert options.allow_http and options.allow_grpc
    annotations = manifest(name)["spec"]["annotations"]
    assert int(annotations["prometheus.kserve.io/port"]) == options.metrics_port
    assert annotations["prometheus.kserve.io/path"] == "/metrics"


def test_the_runtime_runs_as_the_images_user() -> None:
    from deploy_files import dockerfile, final_stage, instruction

    user = instruction(final_stage(dockerfile()), "USER").value[0]
    for name in RUNTIMES:
        ctx = manifest(name)["spec"]["containers"][0]["securityContext"]
        assert user == f"{ctx['runAsUser']}:{ctx['runAsGroup']}" and ctx["runAsNonRoot"]


# -- KServe's runtime selection (pkg/apis/serving/v1beta1/predictor_model.go GetSupportingRuntimes) --


def supports(runtime: dict[str, Any], model: dict[str, Any]) -> bool:
    """Whether KServe would run ``model`` (an InferenceService's predictor.model) on ``runtime``."""
    spec = runtime["spec"]
    if spec.get("disabled") or spec.get("multiModel") or spec.get("workerSpec"):
        return False
    protocol = model.get("protocolVersion", "v1")  # KServe's default for a model
    if spec.get("protocolVersions") and protocol not in spec["protocolVersions"]:
        return False
    labels = set()
    for fmt in spec.get("supportedModelFormats", []):
        if "runtime" in model or fmt.get("autoSelect"):
            labels.add(f"mt:{fmt['name']}")
            if "version" in fmt:
                labels.add(f"mt:{fmt['name']}:{fmt['version']}")
    wanted = model["modelFormat"]
    return (
        f"mt:{wanted['name']}:{wanted['version']}" if "version" in wanted else f"mt:{wanted['name']}"
    ) in labels


def priority(runtime: dict[str, Any], format_name: str) -> int | None:
    return next(
        (
            f.get("priority")
            for f in runtime["spec"].get("supportedModelFormats", [])
            if f["name"] == format_name
        ),
        None,
    )


def chosen(runtimes: list[dict[str, Any]], model: dict[str, Any]) -> str:
    """The runtime KServe picks: the one named (refused when it does not support the model's format:
    KServe's "specified runtime does not support specified framework/version"), else the namespace's
    runtimes first, then the cluster's, each by priority."""
    if "runtime" in model:
        [named] = [r for r in runtimes if r["metadata"]["name"] == model["runtime"]]
        assert supports(named, model), f"{model['runtime']} does not support {model['modelFormat']}"
        return str(model["runtime"])
    name = model["modelFormat"]["name"]

    def ranked(kind: str) -> list[dict[str, Any]]:
        found = [r for r in runtimes if r["kind"] == kind and supports(r, model)]
        # stable: runtimes without a priority keep their order, after those with one
        return sorted(found, key=lambda r: -(priority(r, name) or 0))

    candidates = ranked("ServingRuntime") + ranked("ClusterServingRuntime")
    assert candidates, f"no runtime supports {model}"
    return str(candidates[0]["metadata"]["name"])


def test_a_triton_inference_service_resolves_to_inferd() -> None:
    model = manifest("inferenceservice.yaml")["spec"]["predictor"]["model"]
    ours, cluster = manifest("servingruntime.yaml"), manifest("clusterservingruntime.yaml")
    assert chosen([KSERVE_TRITON, ours, cluster], model) == "inferd"  # the namespace's runtime first
    # the cluster runtime is opt-in: installing it leaves kserve-tritonserver the cluster's choice
    assert chosen([KSERVE_TRITON, cluster], model) == "kserve-tritonserver"
    assert chosen([KSERVE_TRITON, cluster], {**model, "runtime": "kserve-inferd"}) == "kserve-inferd"
    # KServe's default protocol (v1) is served by neither Triton runtime: the example names v2
    v1 = {k: v for k, v in model.items() if k != "protocolVersion"}
    assert not supports(cluster, v1) and not supports(KSERVE_TRITON, v1)


@pytest.mark.parametrize("fmt", [{"name": "onnx", "version": "1"}, {"name": "pytorch", "version": "1"},
                                 {"name": "tensorflow", "version": "2"}, {"name": "openvino"},
                                 {"name": "xgboost"}, {"name": "lightgbm"}])  # fmt: skip
def test_an_inference_service_naming_inferd_may_give_any_format_it_serves(fmt: dict[str, str]) -> None:
    """``runtime: inferd`` with ``modelFormat: onnx`` was refused by KServe: only triton was declared."""
    model = {"modelFormat": fmt, "protocolVersion": "v2", "runtime": "kserve-inferd"}
    cluster = manifest("clusterservingruntime.yaml")
    assert chosen([KSERVE_TRITON, cluster], model) == "kserve-inferd"
    ours = manifest("servingruntime.yaml")
    assert chosen([KSERVE_TRITON, ours], {**model, "runtime": "inferd"}) == "inferd"
    unnamed = {k: v for k, v in model.items() if k != "runtime"}
    assert not supports(ours, unnamed) and not supports(cluster, unnamed)  # never chosen unasked
    with pytest.raises(AssertionError, match="does not support"):  # a format inferd does not serve
        chosen([cluster], {**model, "modelFormat": {"name": "sklearn"}})


def test_kserves_webhook_accepts_the_cluster_runtime_beside_kserve_tritonserver() -> None:
    """KServe's admission webhook refuses a runtime that gives an auto-selected format the priority
    another runtime of a shared protocol gives it (servingruntime_webhook.go)."""
    ours = manifest("clusterservingruntime.yaml")["spec"]
    shared = set(ours["protocolVersions"]) & set(KSERVE_TRITON["spec"]["protocolVersions"])
    assert shared
    for mine in ours["supportedModelFormats"]:
        for theirs in KSERVE_TRITON["spec"]["supportedModelFormats"]:
            same = (mine["name"], mine.get("version")) == (theirs["name"], theirs.get("version"))
            if same and mine.get("autoSelect") and theirs.get("autoSelect"):
                assert mine.get("priority") != theirs.get("priority")
