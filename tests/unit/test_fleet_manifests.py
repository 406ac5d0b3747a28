"""deploy/kubernetes: every object valid against the Kubernetes schemas
(kubernetes-validate ships them: no cluster, no network), the Prometheus
Operator's objects against models made from its CRDs, and the pieces fitting
each other and serve's command line."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess

import pytest

from cudaprobe.commands.serve import serve_command
from cudaprobe.output.prometheus import parse_listen_address
from cudaprobe.sessions.duty import DutyCycle, parse_duty

from ..conftest import HANG_S, REPO

yaml = pytest.importorskip("yaml")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

K8S = REPO / "deploy" / "kubernetes"
OPERATOR = K8S / "components" / "prometheus-operator"  # its kinds: only with the Operator
OPERATOR_API = "monitoring.coreos.com/v1"
# the oldest and the newest Kubernetes whose schemas kubernetes-validate ships
VERSIONS = ("1.25", "1.37")


def objects(where=K8S) -> list[dict]:
    """The objects of a directory's files (the base's, by default)."""
    return [doc for f in sorted(where.glob("*.yaml")) if f.name != "kustomization.yaml"
            for doc in yaml.safe_load_all(f.read_text()) if doc]


def one(kind: str) -> dict:
    (found,) = [o for o in objects() + objects(OPERATOR) if o["kind"] == kind]
    return found


def test_objects_valid_against_the_kubernetes_schemas():
    core = objects()
    assert {o["kind"] for o in core} == {"Namespace", "ServiceAccount", "Role", "RoleBinding",
                                         "DaemonSet", "Service", "NetworkPolicy",
                                         "PriorityClass"}
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
    operator = objects(OPERATOR)
    assert all(o["apiVersion"] == OPERATOR_API for o in operator)
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
    cluster_wide = {"Namespace", "PriorityClass"}
    assert {o["metadata"]["namespace"] for o in objects() + objects(OPERATOR)
            if o["kind"] not in cluster_wide} == {one("Namespace")["metadata"]["name"]}
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    assert pod["priorityClassName"] == one("PriorityClass")["metadata"]["name"]
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
    assert mounts["tracefs"]["mountPath"] == "/sys/kernel/tracing"
    # alive while serve's trace loop polls (/healthz), ready once it counts (/metrics)
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/metrics", "port": "metrics"}


SECCOMP = REPO / "deploy" / "seccomp" / "cudaprobe.json"
CAPABILITIES = ["BPF", "PERFMON", "SYS_PTRACE", "CHECKPOINT_RESTORE"]


def test_the_pod_has_the_capabilities_it_needs_and_no_more():
    pod = one("DaemonSet")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["privileged"] is False and context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    assert context["capabilities"] == {"drop": ["ALL"], "add": CAPABILITIES}
    assert context["seccompProfile"] == {"type": "Localhost",
                                         "localhostProfile": f"profiles/{SECCOMP.name}"}
    assert "hostNetwork" not in pod and pod["automountServiceAccountToken"] is False
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in container["volumeMounts"]:  # host paths read-only; what it writes, its own
        volume = volumes[mount["name"]]
        assert mount.get("readOnly") is True or set(volume) == {"name", "emptyDir"}, mount
    written = {m["mountPath"] for m in container["volumeMounts"] if not m.get("readOnly")}
    assert written == {"/tmp", "/lib/modules"}


def test_the_seccomp_profile_allows_bpf_and_denies_the_doors_a_tracer_never_uses():
    profile = json.loads(SECCOMP.read_text())
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"
    allowed = {n for rule in profile["syscalls"] if rule["action"] == "SCMP_ACT_ALLOW"
               for n in rule["names"]}
    assert {"bpf", "perf_event_open", "ptrace", "process_vm_readv", "pidfd_open",
            "pidfd_getfd", "openat2", "memfd_create", "clone3"} <= allowed
    assert not allowed & {"mount", "umount2", "unshare", "setns", "keyctl", "io_uring_setup",
                          "userfaultfd", "init_module", "finit_module", "kexec_load",
                          "open_by_handle_at", "process_vm_writev", "fsopen", "move_mount"}


def test_only_prometheus_may_reach_the_pods():
    policy = one("NetworkPolicy")
    labels = one("DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert policy["spec"]["egress"] == []  # serve connects nowhere
    (rule,) = policy["spec"]["ingress"]
    (source,) = rule["from"]  # a namespace AND a pod selector: one peer, not two
    assert set(source) == {"namespaceSelector", "podSelector"}
    assert rule["ports"] == [{"port": "metrics", "protocol": "TCP"}]


def test_kustomization_names_every_file_but_the_alternative():
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {f.name for f in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files
    component = yaml.safe_load((OPERATOR / "kustomization.yaml").read_text())
    assert component["kind"] == "Component"
    files = {f.name for f in OPERATOR.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(component["resources"]) == files - {"podmonitor.yaml"}
    (image,) = kustomization["images"]
    (container,) = one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    assert container["image"].split(":")[0] == image["name"]


def rendered(tmp_path, *components: str) -> list[dict]:
    """`kubectl kustomize` of the base, with `components` enabled."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("no kubectl")
    copy = shutil.copytree(K8S, tmp_path / "kubernetes")
    kustomization = yaml.safe_load((copy / "kustomization.yaml").read_text())
    if components:
        kustomization["components"] = list(components)
    (copy / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    out = subprocess.run([kubectl, "kustomize", str(copy)], capture_output=True, text=True,
                         timeout=HANG_S, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_kubectl_kustomize_renders_it(tmp_path):
    """The base: no kind of the Prometheus Operator's (an apply succeeds on a
    cluster without its CRDs); with its component, the ServiceMonitor and the
    rules."""
    base = rendered(tmp_path / "base")
    assert sorted(o["kind"] for o in base) == sorted(o["kind"] for o in objects())
    assert not [o for o in base if o["apiVersion"] == OPERATOR_API]
    ds = next(o for o in base if o["kind"] == "DaemonSet")
    image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example.com/cudaprobe:0.1.0"
    with_operator = rendered(tmp_path / "operator", "components/prometheus-operator")
    assert sorted(o["kind"] for o in with_operator) == sorted(
        [o["kind"] for o in objects()] + ["ServiceMonitor", "PrometheusRule"])


def rendered_with_rbac_proxy(tmp_path) -> list[dict]:
    return rendered(tmp_path, "components/prometheus-operator", "components/kube-rbac-proxy")


def test_the_rbac_proxy_component_without_the_operator_renders(tmp_path):
    kinds = {o["kind"] for o in rendered(tmp_path, "components/kube-rbac-proxy")}
    assert "ClusterRole" in kinds and "ServiceMonitor" not in kinds


def test_the_rbac_proxy_component_puts_serve_behind_it_on_loopback(tmp_path):
    rendered = rendered_with_rbac_proxy(tmp_path)
    for o in rendered:
        if o["apiVersion"] == OPERATOR_API:
            validate_operator_object(o)
        else:
            kubernetes_validate.validate(o, VERSIONS[-1], strict=True)
    ds = next(o for o in rendered if o["kind"] == "DaemonSet")
    serve, proxy = ds["spec"]["template"]["spec"]["containers"]
    assert "ports" not in serve  # nothing of serve's reachable from outside the pod
    assert "livenessProbe" not in serve and "readinessProbe" not in serve  # the kubelet cannot
    params = serve_command.make_context("serve", serve["args"][1:]).params
    host, port = parse_listen_address(params["prometheus_at"])
    assert host == "127.0.0.1"
    assert f"--upstream=http://127.0.0.1:{port}/" in proxy["args"]
    assert proxy["ports"][0]["name"] == "metrics"  # what the Service and the policy name
    assert proxy["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    monitor = next(o for o in rendered if o["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["scheme"] == "https"
    kinds = {o["kind"] for o in rendered}
    assert {"ClusterRole", "ClusterRoleBinding", "NetworkPolicy"} <= kinds


def test_files_are_where_the_docs_say():
    fleet = (REPO / "docs" / "fleet.md").read_text()
    for f in sorted(K8S.glob("*.yaml")) + sorted(OPERATOR.glob("*.yaml")):
        assert f.name in fleet, f.name
    assert "components/prometheus-operator" in fleet


def test_the_daemonset_samples_2_percent_and_the_exact_component_counts_every_call(tmp_path):
    base = one("DaemonSet")
    base_args = base["spec"]["template"]["spec"]["containers"][0]["args"]
    params = serve_command.make_context("serve", base_args[1:]).params  # options serve knows
    assert params["duty"] == "2%" and params["duty_period"] == 30.0
    DutyCycle.check(parse_duty(params["duty"]), params["duty_period"])  # a slice it takes
    ds = next(o for o in rendered(tmp_path, "components/exact") if o["kind"] == "DaemonSet")
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == base_args + ["--duty=100%"]
    kubernetes_validate.validate(ds, VERSIONS[-1], strict=True)
    params = serve_command.make_context("serve", args[1:]).params
    assert parse_duty(params["duty"]) == 1  # the last --duty: every call counted


def test_the_gpu_time_component_adds_gpu_time_to_serve_and_nothing_else(tmp_path):
    ds = next(o for o in rendered(tmp_path, "components/gpu-time") if o["kind"] == "DaemonSet")
    base = one("DaemonSet")
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == base["spec"]["template"]["spec"]["containers"][0]["args"] + ["--gpu-time"]
    assert {k: v for k, v in ds.items() if k != "spec"} == {
        k: v for k, v in base.items() if k != "spec"}
    kubernetes_validate.validate(ds, VERSIONS[-1], strict=True)
    params = serve_command.make_context("serve", args[1:]).params  # options serve knows
    assert params["gpu_time"] is True
    # ptrace, which putting the library in takes, is among the capabilities already
    context = ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]
    assert "SYS_PTRACE" in context["capabilities"]["add"]


def test_the_python_lines_component_adds_py_stacks_after_gpu_time_at_its_measured_duty(tmp_path):
    ds = next(o for o in rendered(tmp_path, "components/gpu-time", "components/python-lines")
              if o["kind"] == "DaemonSet")
    base = one("DaemonSet")
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args == base["spec"]["template"]["spec"]["containers"][0]["args"] + [
        "--gpu-time", "--py-stacks", "--duty=1%", "--duty-period=10"]
    kubernetes_validate.validate(ds, VERSIONS[-1], strict=True)
    params = serve_command.make_context("serve", args[1:]).params  # options serve knows
    assert params["gpu_time"] is True and params["py_stacks"] is True
    # the slices this sets, measured under 2% with the stacks read (the base's are longer)
    assert params["duty"] == "1%" and params["duty_period"] == 10


@pytest.mark.parametrize("component, path", [
    ("components/gpu-operator", "/run/nvidia/driver/usr/lib/x86_64-linux-gnu"),
    ("components/cos", "/home/kubernetes/bin/nvidia/lib64")])
def test_the_driver_components_point_the_driver_volume_where_those_nodes_keep_it(
        tmp_path, component, path):
    ds = next(o for o in rendered(tmp_path, component) if o["kind"] == "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["driver"]["hostPath"] == {"path": path, "type": "Directory"}
    base = {v["name"]: v for v in one("DaemonSet")["spec"]["template"]["spec"]["volumes"]}
    assert {k: v for k, v in volumes.items() if k != "driver"} == {
        k: v for k, v in base.items() if k != "driver"}  # nothing else moved
    kubernetes_validate.validate(ds, VERSIONS[-1], strict=True)
