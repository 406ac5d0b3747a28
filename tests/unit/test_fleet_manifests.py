"""deploy/kubernetes: every object valid against the Kubernetes schemas
(kubernetes-validate ships them: no cluster, no network), the Prometheus
Operator's objects against models made from its CRDs, and the pieces fitting
each other and serve's command line."""

from __future__ import annotations

import copy
import shutil
import subprocess

import pytest

from cudaprobe.commands.serve import serve_command
from cudaprobe.output.prometheus import parse_listen_address

from ..conftest import HANG_S, REPO

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

K8S = REPO / "deploy" / "kubernetes"
OPERATOR_API = "monitoring.coreos.com/v1"
# the oldest and the newest Kubernetes whose schemas kubernetes-validate ships
VERSIONS = ("1.25", "1.37")


def objects(name: str | None = None) -> list[dict]:
    files = [K8S / name] if name else sorted(K8S.glob("*.yaml"))
    return [doc for f in files if f.name != "kustomization.yaml"
            for doc in yaml.safe_load_all(f.read_text()) if doc]


def one(kind: str) -> dict:
    (found,) = [o for o in objects() if o["kind"] == kind]
    return found


def test_objects_valid_against_the_kubernetes_schemas():
    core = [o for o in objects() if o["apiVersion"] != OPERATOR_API]
    assert {o["kind"] for o in core} == {"Namespace", "ServiceAccount", "Role", "RoleBinding",
                                         "DaemonSet", "Service"}
    for version in VERSIONS:
        for o in core:
            kubernetes_validate.validate(o, version, strict=True)


def test_the_schemas_refuse_a_broken_daemonset():
    broken = copy.deepcopy(one("DaemonSet"))
    broken["spec"]["template"]["spec"]["hostPid"] = True  # hostPID misspelt
    with pytest.raises(kubernetes_validate.ValidationError, match="hostPid"):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)
    broken = copy.deepcopy(one("DaemonSet"))
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "9464"
    with pytest.raises(kubernetes_validate.ValidationError, match="containerPort"):
        kubernetes_validate.validate(broken, VERSIONS[-1], strict=True)


def unknown_keys(data: object, model: object, path: str = "") -> list[str]:
    """Keys of `data` that the pydantic model parsed from it has no field for
    (the models ignore them: a misspelt key would pass)."""
    fields = getattr(type(model), "model_fields", None)
    if fields is None or not isinstance(data, dict):
        if isinstance(data, list) and isinstance(model, list):
            return [k for d, m in zip(data, model) for k in unknown_keys(d, m, path + "[]")]
        return []
    by_alias = {(f.alias or name): name for name, f in fields.items()}
    found = []
    for key, value in data.items():
        if key not in by_alias:
            found.append(f"{path}.{key}")
        else:
            found += unknown_keys(value, getattr(model, by_alias[key]), f"{path}.{key}")
    return found


def operator_model(kind: str):
    v1 = pytest.importorskip("cloudcoil.models.prometheus_operator.v1")
    return getattr(v1, kind)


def validate_operator_object(o: dict) -> None:
    model = operator_model(o["kind"]).model_validate(o)
    assert unknown_keys(o, model) == [], o["kind"]


def test_operator_objects_valid_against_the_crd_models():
    operator = [o for o in objects() if o["apiVersion"] == OPERATOR_API]
    assert sorted(o["kind"] for o in operator) == ["PodMonitor", "PrometheusRule",
                                                   "ServiceMonitor"]
    for o in operator:
        validate_operator_object(o)


def test_the_crd_models_refuse_a_broken_monitor():
    pydantic = pytest.importorskip("pydantic")
    broken = copy.deepcopy(one("ServiceMonitor"))
    broken["spec"]["endpoints"][0]["relabelings"][0]["action"] = "rename"  # not an action
    with pytest.raises(pydantic.ValidationError, match="action"):
        validate_operator_object(broken)
    broken = copy.deepcopy(one("PodMonitor"))
    broken["spec"]["podMetricEndpoints"] = broken["spec"].pop("podMetricsEndpoints")
    with pytest.raises(AssertionError):
        validate_operator_object(broken)


def test_the_pieces_fit():
    ds = one("DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    labels = ds["spec"]["template"]["metadata"]["labels"]
    assert ds["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert one("Service")["spec"]["selector"].items() <= labels.items()
    for kind in ("ServiceMonitor", "PodMonitor"):
        assert one(kind)["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert {o["metadata"]["namespace"] for o in objects() if o["kind"] != "Namespace"} == {
        one("Namespace")["metadata"]["name"]}
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    assert one("RoleBinding")["roleRef"]["name"] == one("Role")["metadata"]["name"]
    assert pod["hostPID"] is True  # pids of events are the pids in /proc

    (container,) = pod["containers"]
    (port,) = container["ports"]
    args = container["args"]
    assert args[0] == "serve"
    params = serve_command.make_context("serve", args[1:]).params  # options serve knows
    host, number = parse_listen_address(params["prometheus_at"])
    assert (host, number) == ("0.0.0.0", port["containerPort"])
    (service_port,) = one("Service")["spec"]["ports"]
    assert service_port["targetPort"] == port["name"] == "metrics"
    assert one("ServiceMonitor")["spec"]["endpoints"][0]["port"] == service_port["name"]
    assert one("PodMonitor")["spec"]["podMetricsEndpoints"][0]["port"] == port["name"]

    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts.keys() == volumes.keys()
    (lib,) = params["libs"]
    assert any(lib.startswith(m["mountPath"] + "/") for m in mounts.values())
    assert any(m["mountPath"] == "/sys/kernel/tracing" for m in mounts.values())


def test_kustomization_names_every_file_but_the_alternative():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {f.name for f in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files - {"podmonitor.yaml"}
    (image,) = kustomization["images"]
    (container,) = one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert container["image"].split(":")[0] == image["name"]


def test_kubectl_kustomize_renders_it():
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl")
    out = subprocess.run([kubectl, "kustomize", str(K8S)], capture_output=True, text=True,
                         timeout=HANG_S, check=True).stdout
    rendered = [d for d in yaml.safe_load_all(out) if d]
    assert sorted(o["kind"] for o in rendered) == sorted(
        o["kind"] for o in objects() if o["kind"] != "PodMonitor")
    ds = next(o for o in rendered if o["kind"] == "DaemonSet")
    image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example.com/cudaprobe:0.1.0"


def test_files_are_where_the_docs_say():
    fleet = (REPO / "docs" / "fleet.md").read_text()
    for f in sorted(K8S.glob("*.yaml")):
        assert f.name in fleet, f.name
