"""The Helm chart (deploy/helm/inferd), rendered by Helm's own engine with default and non-default
values: the manifests are valid Kubernetes objects (the API's JSON schemas, strict: no unknown field),
the container's command line parses with inferd's CLI parser into the ports and repositories the
probes, Service and annotations name, and the HPA asks for the metric the server exports. No cluster
is contacted (tests/e2e/test_e2e_helm_chart.py runs the rendered command line against a real server)."""

from __future__ import annotations

from typing import Any

import pytest

import inferd
from deploy_files import (
    ADAPTER_VALUES,
    CHART,
    console_scripts,
    container,
    container_port,
    dockerfile,
    final_stage,
    helm,
    image_command,
    notes,
    read_yaml,
    render,
    the,
)
from inferd.cli import build_parser, options_from_args
from inferd.metrics.scaling import FAMILY as SCALING_FAMILY
from inferd.options import ServerOptions
from inferd.repository.remote import parse_store_url

SCALING_METRIC = SCALING_FAMILY[0]
#: the oldest and the newest Kubernetes the chart is checked against (Chart.yaml's kubeVersion)
KUBE_VERSIONS = ("1.25", "1.37")

MINIMAL: dict[str, Any] = {"modelRepositories": ["s3://models/repo"], "storage": {"secretName": "inferd-s3"}}
#: every optional part switched on, every default changed
EVERYTHING: dict[str, Any] = {
    "image": {"repository": "registry.example/ml/inferd", "tag": "0.1.0-full", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "registry"}],
    "modelRepositories": ["as://account/models/prod", "s3://127.0.0.1:9000/models/repo", "/models/local"],
    "modelControlMode": "poll",
    "repositoryPollSecs": 30,
    "storage": {
        "secretName": "store-keys",
        "env": {"AWS_ENDPOINT_URL": "http://minio:9000", "AWS_REGION": "eu-west-1"},
    },
    "modelCache": {"volume": {"persistentVolumeClaim": {"claimName": "inferd-cache"}}},
    "modelVolume": {
        "mountPath": "/models",
        "volume": {"persistentVolumeClaim": {"claimName": "models", "readOnly": True}},
    },
    "ports": {"http": 9000, "grpc": 9001, "metrics": 9002},
    "exitTimeoutSecs": 45,
    "preStopSleepSeconds": 8,
    "extraArgs": [
        "--log-verbose=1",
        "--exit-on-error=false",
        "--backend-config=python,execution-mode=process",
    ],
    "extraEnv": [
        {"name": "AZURE_STORAGE_KEY", "valueFrom": {"secretKeyRef": {"name": "azure", "key": "key"}}},
        {"name": "OMP_NUM_THREADS", "value": "2"},
    ],
    "resources": {"requests": {"cpu": "2", "memory": "4Gi"}, "limits": {"cpu": "4", "memory": "8Gi"}},
    "autoscaling": {
        "enabled": True,
        "minReplicas": 2,
        "maxReplicas": 20,
        "targetQueueTimeUs": 2000,
        "model": "densenet_onnx",
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}},
    },
    "metrics": {"serviceMonitor": {"enabled": True, "interval": "30s", "labels": {"release": "prom"}}},
    "podDisruptionBudget": {"enabled": True, "minAvailable": 1},
    "serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/inferd"}},
    "podLabels": {"azure.workload.identity/use": "true"},
    "podAnnotations": {"team": "ml"},
    "nodeSelector": {"kubernetes.io/arch": "amd64"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}],
    "service": {"type": "LoadBalancer", "annotations": {"example/lb": "internal"}, "headless": True},
}
NO_AUTOSCALING: dict[str, Any] = {
    **MINIMAL,
    "autoscaling": {"enabled": False},
    "replicaCount": 3,
    "metrics": {"podAnnotations": False},
    "serviceAccount": {"create": False, "name": "existing"},
    "preStopSleepSeconds": 0,
}
#: a pod on a GPU node: the device plugin's resource, the GPU nodes' taint and label (docs/how-to/kubernetes.md)
GPU: dict[str, Any] = {
    **MINIMAL,
    "image": {"tag": "0.1.0-gpu"},
    "resources": {
        "requests": {"cpu": "4", "memory": "16Gi"},
        "limits": {"memory": "32Gi", "nvidia.com/gpu": 1},
    },
    "nodeSelector": {"nvidia.com/gpu.present": "true"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "extraArgs": ["--min-supported-compute-capability=7.0"],
}
VALUE_SETS = {"minimal": MINIMAL, "everything": EVERYTHING, "no-autoscaling": NO_AUTOSCALING, "gpu": GPU}


@pytest.fixture(params=sorted(VALUE_SETS))
def case(request: pytest.FixtureRequest) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    values = VALUE_SETS[request.param]
    return values, render(values)


def parse_serve(argv: list[str]) -> ServerOptions:
    """argv as ``inferd`` would take it: its parser (errors exit, failing the test) and its options."""
    assert argv[0] in console_scripts(), argv
    assert console_scripts()[argv[0]] == "inferd.cli:main"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "serve"
    return options_from_args(args)


def cluster_ip_service(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """The release's Service (not the headless one)."""
    [service] = [d for d in docs if d["kind"] == "Service" and d["spec"].get("clusterIP") != "None"]
    return service


def test_default_values_name_what_is_missing() -> None:
    h = helm()
    with (
        h.Chart.load(CHART) as chart,
        pytest.raises(h.HelmRenderError, match="modelRepositories: name at least one"),
    ):
        chart.render({}, name="inferd", namespace="ml")


def test_helm_lint_finds_nothing_to_fix() -> None:
    report = helm().lint(CHART, MINIMAL, strict=True)
    assert report["errors"] == []
    # the one INFO Helm always gives a chart without an icon
    assert [m for m in report["messages"] if m["severity"] > 1] == []


def test_manifests_are_valid_kubernetes_objects(case: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (make install)")
    _, docs = case
    checked = 0
    for doc in docs:
        if doc["apiVersion"].startswith("monitoring.coreos.com/"):
            continue  # the Prometheus Operator's CRD: checked field by field below
        for version in KUBE_VERSIONS:
            kv.validate(doc, version, strict=True)  # raises with the field at fault
        checked += 1
    assert checked >= 2  # the Deployment and the Service at least


def test_the_schema_check_catches_a_wrong_field() -> None:
    kv = pytest.importorskip("kubernetes_validate", reason="kubernetes-validate not installed (make install)")
    deployment = the(render(MINIMAL), "Deployment")
    kv.validate(deployment, KUBE_VERSIONS[-1], strict=True)
    deployment["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["httpGet"]["paht"] = "/"
    with pytest.raises(kv.ValidationError, match="paht"):
        kv.validate(deployment, KUBE_VERSIONS[-1], strict=True)


def test_objects_of_each_value_set() -> None:
    kinds = {name: sorted(d["kind"] for d in render(values)) for name, values in VALUE_SETS.items()}
    assert kinds == {
        "minimal": ["Deployment", "Service", "ServiceAccount"],  # no HPA unless asked: it needs an adapter
        "everything": [
            "Deployment",
            "HorizontalPodAutoscaler",
            "PodDisruptionBudget",
            "Service",
            "Service",
            "ServiceAccount",
            "ServiceMonitor",
        ],
        "no-autoscaling": ["Deployment", "Service"],
        "gpu": ["Deployment", "Service", "ServiceAccount"],
    }


def test_a_gpu_pod_asks_the_device_plugin_for_its_gpu_on_a_gpu_node() -> None:
    docs = render(GPU)
    c = container(docs)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
    pod = the(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["tolerations"] == GPU["tolerations"]
    assert parse_serve(image_command(c)).min_supported_compute_capability == 7.0


def test_container_command_line_parses_with_inferds_cli(
    case: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    values, docs = case
    c = container(docs)
    options = parse_serve(image_command(c))
    # the ports the server listens on are the container's named ports
    assert (options.http_port, options.grpc_port, options.metrics_port) == (
        container_port(c, "http"),
        container_port(c, "grpc"),
        container_port(c, "metrics"),
    )
    # each repository arrives as the same store (or the same local path)
    assert len(options.model_repository) == len(values["modelRepositories"])
    for parsed, given in zip(options.model_repository, values["modelRepositories"], strict=True):
        store = parse_store_url(given)
        assert parse_store_url(parsed) == store
        if store is None:
            assert str(parsed) == given
    assert options.model_control_mode == values.get("modelControlMode", "none")
    # Kubernetes waits longer than the preStop hook and the server's drain, so it never kills a
    # server mid-drain
    grace = the(docs, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert options.exit_timeout_secs == values.get("exitTimeoutSecs", 30)
    assert values.get("preStopSleepSeconds", 5) + options.exit_timeout_secs < grace


def test_the_non_default_flags_reach_the_server() -> None:
    options = parse_serve(image_command(container(render(EVERYTHING))))
    assert options.repository_poll_secs == 30
    assert options.log_verbose == 1 and options.exit_on_error is False
    assert options.backend_config == ["python,execution-mode=process"]


def test_probes_are_tritons_health_endpoints_on_the_http_port(
    case: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    _, docs = case
    c = container(docs)
    probes = {k: c[k]["httpGet"] for k in ("startupProbe", "livenessProbe", "readinessProbe")}
    assert probes == {
        "startupProbe": {"path": "/v2/health/live", "port": "http"},
        "livenessProbe": {"path": "/v2/health/live", "port": "http"},
        "readinessProbe": {"path": "/v2/health/ready", "port": "http"},
    }
    # the startup probe allows a slow first load (models fetched from object storage)
    startup = c["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


def test_service_exposes_the_three_ports_of_the_pods(
    case: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    values, docs = case
    service, deployment = cluster_ip_service(docs), the(docs, "Deployment")
    pod = deployment["spec"]["template"]
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    assert deployment["spec"]["selector"]["matchLabels"] == service["spec"]["selector"]
    ports = {p["name"]: (p["port"], p["targetPort"]) for p in service["spec"]["ports"]}
    want = values.get("ports", {"http": 8000, "grpc": 8001, "metrics": 8002})
    assert ports == {name: (want[name], name) for name in ("http", "grpc", "metrics")}
    assert {p["name"] for p in container(docs)["ports"]} == set(ports)


def test_metrics_port_is_annotated_for_prometheus() -> None:
    for values in (MINIMAL, EVERYTHING):
        docs = render(values)
        annotations = the(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        options = parse_serve(image_command(container(docs)))
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/port"] == str(options.metrics_port)
        assert annotations["prometheus.io/path"] == "/metrics"
    assert "annotations" not in the(render(NO_AUTOSCALING), "Deployment")["spec"]["template"]["metadata"]


def test_service_monitor_scrapes_the_services_metrics_port() -> None:
    docs = render(EVERYTHING)
    monitor, service = the(docs, "ServiceMonitor"), cluster_ip_service(docs)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "30s"}]
    assert "metrics" in {p["name"] for p in service["spec"]["ports"]}


def test_hpa_scales_the_deployment_on_the_servers_queue_time_gauge() -> None:
    for values in ({**MINIMAL, "autoscaling": {"enabled": True}}, EVERYTHING):
        docs = render(values)
        hpa, deployment = the(docs, "HorizontalPodAutoscaler"), the(docs, "Deployment")
        assert hpa["spec"]["scaleTargetRef"] == {
            "apiVersion": deployment["apiVersion"],
            "kind": "Deployment",
            "name": deployment["metadata"]["name"],
        }
        [metric] = hpa["spec"]["metrics"]
        assert metric["type"] == "Pods"
        assert metric["pods"]["metric"]["name"] == SCALING_METRIC
        target = values.get("autoscaling", {}).get("targetQueueTimeUs", 5000)
        assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": str(target)}
        assert "replicas" not in deployment["spec"]  # the HPA owns the count
    hpa = the(render(EVERYTHING), "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["selector"] == {
        "matchLabels": {"model": "densenet_onnx"}
    }
    assert hpa["spec"]["behavior"] == {"scaleDown": {"stabilizationWindowSeconds": 300}}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 20)
    assert the(render(NO_AUTOSCALING), "Deployment")["spec"]["replicas"] == 3


def test_prometheus_adapter_rule_passes_the_gauge_through() -> None:
    [rule] = read_yaml(ADAPTER_VALUES)["rules"]["custom"]
    assert rule["seriesQuery"].startswith(SCALING_METRIC + "{")
    assert rule["name"]["as"] == SCALING_METRIC
    assert rule["resources"]["overrides"] == {
        "namespace": {"resource": "namespace"},
        "pod": {"resource": "pod"},
    }


def test_store_credentials_come_from_the_secret_only() -> None:
    c = container(render(EVERYTHING))
    assert c["envFrom"] == [{"secretRef": {"name": "store-keys"}}]
    env = {e["name"]: e for e in c["env"]}
    assert env["AWS_ENDPOINT_URL"]["value"] == "http://minio:9000"
    assert env["AZURE_STORAGE_KEY"] == {
        "name": "AZURE_STORAGE_KEY",
        "valueFrom": {"secretKeyRef": {"name": "azure", "key": "key"}},
    }
    assert "envFrom" not in container(render({"modelRepositories": ["/models"]}))


@pytest.mark.parametrize(
    "values",
    [
        {"storage": {"env": {"AWS_SECRET_ACCESS_KEY": "hunter2"}}},
        {"storage": {"env": {"AZURE_STORAGE_CONNECTION_STRING": "AccountKey=hunter2"}}},
        {"storage": {"accessKey": "hunter2"}},
        {"extraEnv": [{"name": "AWS_SECRET_ACCESS_KEY", "value": "hunter2"}]},
    ],
    ids=["s3-secret-in-env", "azure-string-in-env", "unknown-storage-key", "secret-in-extraEnv"],
)
def test_values_refuse_credentials(values: dict[str, Any]) -> None:
    h = helm()
    with h.Chart.load(CHART) as chart, pytest.raises(h.HelmValuesError):
        chart.validate_schema(chart.merge_values({**MINIMAL, **values}))


def test_runs_unprivileged_on_a_read_only_root() -> None:
    pod = the(render(MINIMAL), "Deployment")["spec"]["template"]["spec"]
    c = container(render(MINIMAL))
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    # so every place inferd writes is a volume: the model cache, temporary files, shared memory
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts == {"/var/cache/inferd": "model-cache", "/tmp": "tmp", "/dev/shm": "dshm"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["INFERD_MODEL_CACHE"].startswith("/var/cache/inferd/")
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert c["resources"]["requests"] == {"cpu": "1", "memory": "2Gi"}


def test_a_repository_volume_is_mounted_read_only() -> None:
    docs = render(EVERYTHING)
    mounts = {m["name"]: m for m in container(docs)["volumeMounts"]}
    assert mounts["models"] == {"name": "models", "mountPath": "/models", "readOnly": True}
    volumes = {v["name"]: v for v in the(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    assert volumes["models"]["persistentVolumeClaim"]["claimName"] == "models"
    assert volumes["model-cache"] == {
        "name": "model-cache",
        "persistentVolumeClaim": {"claimName": "inferd-cache"},
    }


def test_image_tag_defaults_to_the_inferd_version() -> None:
    assert container(render(MINIMAL))["image"] == f"inferd:{inferd.__version__}"
    assert container(render(EVERYTHING))["image"] == "registry.example/ml/inferd:0.1.0-full"


def test_notes_name_the_service_and_the_metric() -> None:
    text = notes(MINIMAL)
    assert "inferd.ml:8000" in text and "s3://models/repo" in text
    assert SCALING_METRIC in text


def test_a_pre_stop_hook_serves_on_while_the_pod_leaves_the_endpoints(
    case: tuple[dict[str, Any], list[dict[str, Any]]],
) -> None:
    values, docs = case
    sleep = values.get("preStopSleepSeconds", 5)
    c = container(docs)
    if sleep:
        assert c["lifecycle"] == {"preStop": {"exec": {"command": ["sleep", str(sleep)]}}}
    else:
        assert "lifecycle" not in c
    # the grace period counts from the hook's start: the hook, the drain, then 10 s more
    grace = the(docs, "Deployment")["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace == sleep + values.get("exitTimeoutSecs", 30) + 10


def test_the_image_has_the_hooks_sleep() -> None:
    """``sleep`` comes with the final stage's Debian base (coreutils), not with the venv."""
    base = final_stage(dockerfile())[0].value[0]
    assert base.startswith("python:") and "slim-bookworm" in base


def test_notes_name_the_headless_service_when_there_is_one() -> None:
    assert "headless" not in notes(MINIMAL)
    text = notes({**MINIMAL, "service": {"headless": True}})
    assert "dns:///inferd-headless.ml.svc:8001 with round_robin" in text


def test_headless_service_hands_grpc_clients_every_ready_pod() -> None:
    assert [d for d in render(MINIMAL) if d["kind"] == "Service"] == [cluster_ip_service(render(MINIMAL))]
    docs = render({**MINIMAL, "service": {"headless": True}})
    main = cluster_ip_service(docs)
    [headless] = [d for d in docs if d["kind"] == "Service" and d is not main]
    assert headless["metadata"]["name"] == main["metadata"]["name"] + "-headless"
    spec = headless["spec"]
    assert spec["clusterIP"] == "None" and spec["publishNotReadyAddresses"] is False
    assert spec["selector"] == the(docs, "Deployment")["spec"]["selector"]["matchLabels"]
    ports = {p["name"]: p["port"] for p in spec["ports"]}
    c = container(docs)
    # the pods' own ports (no metrics: the ServiceMonitor scrapes through the main Service only)
    assert ports == {"http": container_port(c, "http"), "grpc": container_port(c, "grpc")}
    assert all(p["targetPort"] in ("http", "grpc") for p in spec["ports"])
